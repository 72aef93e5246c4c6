"""Translation data, tokenizer and a 30-step `Seq2SeqTrainer` run of a tiny AGF + PCM-V model, offline."""

import gzip
import json
from pathlib import Path

import pytest
import sacrebleu
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from plldr_hf.evaluation import token_accuracy_counts
from plldr_hf.training.corpus import load_translation_dataset, take_subset
from plldr_hf.training.options import TranslationOptions
from plldr_hf.training.preprocessing import preprocess_translation
from plldr_hf.training.run import RunReport, train
from plldr_hf.training.tokenizers import train_joint_tokenizer
from plldr_hf.training.translation_trainer import (
    LengthBucketSampler,
    evaluate_translation,
    format_scores,
    wrong_source,
)


PAIRS = [
    {"en": f"Open file number {i} .", "de": f"Datei Nummer {i} öffnen ."} for i in range(40)
]  # fmt: skip


@pytest.fixture(scope="module")
def libreoffice():
    return load_translation_dataset("libreoffice")


def test_embedded_dataset_splits(libreoffice):
    sizes = {split: len(ds) for split, ds in libreoffice.items()}
    assert sizes == {"train": 32346, "validation": 1141, "test": 1416, "gnome": 3560}
    assert libreoffice["train"].features["translation"].languages == ["en", "de"]
    train_en = {pair["en"] for pair in libreoffice["train"]["translation"]}
    assert not any(pair["en"] in train_en for pair in libreoffice["test"]["translation"]), "test leaks into train"


def _write_jsonl(path, rows):
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def test_local_files_schema_and_splits(tmp_path):
    _write_jsonl(tmp_path / "train.jsonl.gz", [{"translation": p} for p in PAIRS[:30]])
    # flat language columns and an extra column are accepted for a named split
    (tmp_path / "held.jsonl").write_text("".join(json.dumps({**p, "id": i}) + "\n" for i, p in enumerate(PAIRS[30:])))

    ds = load_translation_dataset(
        [tmp_path / "train.jsonl.gz", f"test={tmp_path / 'held.jsonl'}"], validation_size=5, out_of_domain_test=False
    )
    assert sorted(ds) == ["test", "train", "validation"]
    assert (len(ds["train"]), len(ds["validation"]), len(ds["test"])) == (25, 5, 10)
    assert ds["test"].column_names == ["translation"]
    assert ds["test"][0]["translation"] == PAIRS[30]

    # a folder of split-named files, Parquet included, plus the GNOME out-of-domain split
    import pandas as pd

    folder = tmp_path / "corpus"
    folder.mkdir()
    _write_jsonl(folder / "train.jsonl.gz", [{"translation": p} for p in PAIRS[:20]])
    pd.DataFrame({"translation": PAIRS[20:30]}).to_parquet(folder / "dev.parquet")
    pd.DataFrame({"translation": PAIRS[30:]}).to_parquet(folder / "test.parquet")
    ds = load_translation_dataset(folder)
    assert {s: len(d) for s, d in ds.items()} == {"train": 20, "validation": 10, "test": 10, "gnome": 3560}


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: ["no_such_corpus"], "neither a known name"),
        (lambda p: [p / "notes.txt"], "unsupported file type"),
        (lambda p: [p / "train.jsonl.gz", p / "bad.jsonl"], "cannot tell which split"),
        (lambda p: [f"test={p / 'bad.jsonl'}"], "no training data"),
        (lambda p: [p / "bad.jsonl"], "expected a 'translation' column"),
    ],
    ids=["unknown-name", "bad-extension", "ambiguous-split", "no-train", "bad-schema"],
)
def test_bad_dataset_arguments_are_named(tmp_path, make, match):
    _write_jsonl(tmp_path / "train.jsonl.gz", [{"translation": p} for p in PAIRS])
    (tmp_path / "bad.jsonl").write_text(json.dumps({"source": "a", "target": "b"}) + "\n")
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        load_translation_dataset(make(tmp_path), validation_size=1, test_size=1)


def test_wmt17_offline_gives_a_clear_error():
    # conftest sets HF_DATASETS_OFFLINE=1, so this must fail at once and say what to do instead
    with pytest.raises(ValueError, match="wmt/wmt17.*use --dataset libreoffice"):
        load_translation_dataset("wmt17")


@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_joint_tokenizer_round_trip(libreoffice, tmp_path, model):
    train = take_subset(libreoffice["train"], 2000)
    tok = train_joint_tokenizer(train, vocab_size=400, model=model)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert len(tok) == 400

    pair = libreoffice["test"][3]["translation"]
    ids = tok(pair["en"])["input_ids"]
    assert ids[-1] == tok.eos_token_id and tok.bos_token_id not in ids
    assert tok.decode(ids, skip_special_tokens=True) == pair["en"]
    # German subwords come from the same vocabulary
    assert tok.decode(tok(text_target=pair["de"])["input_ids"], skip_special_tokens=True) == pair["de"]

    tok.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded(pair["en"], text_target=pair["de"]) == tok(pair["en"], text_target=pair["de"])

    with pytest.raises(ValueError, match="no room"):
        train_joint_tokenizer(["a b"], vocab_size=4)


def test_training_arguments_guards(tmp_path):
    with pytest.raises(
        ValueError, match="--label_smoothing_factor 0.1: the model computes its own loss; set --label-smoothing"
    ):
        TranslationOptions(output_dir=str(tmp_path), label_smoothing_factor=0.1)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(TranslationOptions(output_dir=str(tmp_path / "empty"), resume_from_checkpoint="last"))
    # named when the options are made, before any data is read
    with pytest.raises(TypeError, match="no_such_argument"):
        TranslationOptions(output_dir=str(tmp_path), no_such_argument=1)
    with pytest.raises(ValueError, match="--optim: must be one of .*, got 'no_such_optimizer'"):
        TranslationOptions(output_dir=str(tmp_path), optim="no_such_optimizer")


def test_options_own_the_defaults_of_the_training_arguments(tmp_path):
    # one owner of each default: the options are the Seq2SeqTrainingArguments, with the recipe's defaults
    args = TranslationOptions(output_dir=str(tmp_path))
    assert (args.per_device_train_batch_size, args.learning_rate, args.warmup_steps) == (32, 5e-4, 1000)
    assert (args.adam_beta2, args.adam_epsilon, args.max_grad_norm, args.num_train_epochs) == (0.98, 1e-9, 1.0, 10.0)
    assert args.predict_with_generate and args.generation_num_beams == 1 and args.max_steps == -1
    tiny = TranslationOptions.from_name("tiny", pcmv=True)
    assert (tiny.size, tiny.max_steps, tiny.vocab_size, tiny.pcmv) == ("tiny", 30, 300, True)
    with pytest.raises(ValueError, match="no field"):
        TranslationOptions.from_name("tiny", no_such_field=3)


def _teacher_forced_reference(model, tokenizer, raw, max_length, source_shift=0):
    """Independent accuracy and cross-entropy: plain forward passes, one segment at a time; with `source_shift`,
    each target is paired with the source `source_shift` rows further on (the wrong-source diagnostic)."""
    tokenized = preprocess_translation(raw, tokenizer, max_source_length=max_length, max_target_length=max_length)
    correct = total = 0
    nll = 0.0
    with torch.no_grad():
        for index, row in enumerate(tokenized):
            labels = torch.tensor([row["labels"]])
            source = tokenized[(index + source_shift) % len(tokenized)]["input_ids"]
            logits = model(input_ids=torch.tensor([source]), labels=labels).logits
            c, t = token_accuracy_counts(logits, labels)
            correct, total = correct + c, total + t
            nll += torch.nn.functional.cross_entropy(logits[0], labels[0], reduction="sum").item()
    return correct, total, nll / total


def test_seq2seq_trainer_30_steps_end_to_end(tmp_path):
    length = 32
    options = TranslationOptions.from_name(
        "tiny",
        output_dir=str(tmp_path),
        pcmv=True,
        max_eval_samples=24,
        max_test_samples=24,
        per_device_eval_batch_size=16,
        use_cpu=True,
        disable_tqdm=True,
        out_of_domain_test=True,  # --gnome-test: the embedded out-of-domain pairs too
    )
    assert (options.max_steps, options.max_source_length, options.vocab_size) == (30, length, 300)
    run = train(options)

    # training ran and learned something: the loss fell, accuracy beats chance (1/300) by far
    losses = [h["loss"] for h in run.log_history if "loss" in h]
    assert run.global_step == run.max_steps == 30 and len(losses) == 6
    assert losses[-1] < losses[0] - 0.2, losses
    evals = [h for h in run.log_history if "eval_bleu" in h]
    assert len(evals) == 1 and evals[0]["step"] == 30
    assert 0.02 < evals[0]["eval_accuracy"] < 1
    assert 0 <= evals[0]["eval_bleu"] <= 100 and 0 < evals[0]["eval_chrf"] <= 100

    # final scores on the in-domain and the out-of-domain test sets, with sacrebleu signatures
    assert sorted(run.scores) == ["gnome", "test"]
    for split, scores in run.scores.items():
        assert scores["segments"] == 24
        assert (
            scores["bleu_signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
        )
        assert 0.02 < scores["accuracy"] < 1 and scores["loss"] > 0
        saved = json.loads((tmp_path / f"{split}_results.json").read_text())
        assert saved["chrf"] == scores["chrf"] and "hypotheses" not in saved

    # what was saved reproduces everything: model + tokenizer reload and give the same translations and accuracy
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert model.config.model_type == "agf" and model.config.pcmv and model.config.use_cache
    assert len(tokenizer) == model.config.vocab_size == 300
    raw_test = run.datasets["test"]
    sources = [pair["en"] for pair in raw_test["translation"]]
    # other batch sizes than the evaluation used: the model is padding-invariant, so greedy output is identical
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    outputs = translator(sources, batch_size=5, num_beams=1, max_new_tokens=length, max_length=length)
    hyps = [output[0]["translation_text"] for output in outputs]
    assert hyps == run.scores["test"]["hypotheses"]
    refs = [p["de"] for p in raw_test["translation"]]
    assert run.scores["test"]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert run.scores["test"]["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)
    correct, total, loss = _teacher_forced_reference(model, tokenizer, raw_test, length)
    assert total == run.scores["test"]["target_tokens"]
    assert correct / total == pytest.approx(run.scores["test"]["accuracy"])
    assert loss == pytest.approx(run.scores["test"]["loss"], rel=1e-5)
    # the source-use diagnostic: each target with the source 12 rows on, computed independently, and the gap
    wrong, wrong_total, _ = _teacher_forced_reference(model, tokenizer, raw_test, length, source_shift=12)
    assert wrong_total == total and wrong / total == pytest.approx(run.scores["test"]["wrong_source_accuracy"])
    assert run.scores["test"]["source_gap"] == pytest.approx(correct / total - wrong / total)
    assert "src gap" in format_scores(run.scores["test"])
    # ... and logged beside every validation point of training
    logged = [h for h in run.log_history if "eval_source_gap" in h]
    assert len(logged) == len(evals) and -1 <= logged[0]["eval_source_gap"] <= 1
    # the cheap teacher-forced-only evaluation gives the same accuracy and loss without decoding
    quick = evaluate_translation(
        model, tokenizer, raw_test, max_source_length=length, max_target_length=length, generate=False
    )
    assert "bleu" not in quick and quick["accuracy"] == pytest.approx(run.scores["test"]["accuracy"])
    assert quick["loss"] == pytest.approx(run.scores["test"]["loss"], rel=1e-5)

    # the run's report is saved beside the model, with the fields of every family's report
    saved = RunReport.load(tmp_path)
    assert (saved.family, saved.global_step, saved.vocab_size) == ("agf", 30, 300)
    assert saved.scores["test"]["bleu"] == run.scores["test"]["bleu"] and "hypotheses" not in saved.scores["test"]
    assert saved.train_examples == run.train_examples > 0 and saved.seconds_per_step > 0
    assert saved.loss_curves and Path(saved.loss_curves).is_file()

    assert (tmp_path / "checkpoint-30" / "tokenizer.json").is_file()
    # the saved tokenizer files carry no call state (truncation of the preprocessing call, which runs with a cold
    # datasets cache and not with a warm one): the same seed gives the same files, and plain `tokenizers` keeps
    # every token of a long text
    from tokenizers import Tokenizer

    for folder in (tmp_path, tmp_path / "checkpoint-30"):
        saved = json.loads((folder / "tokenizer.json").read_text())
        assert saved["truncation"] is None and saved["padding"] is None, folder
    long_text = " ".join(sources) * 3
    plain = Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode(long_text).ids
    assert len(plain) > 4 * length and plain == tokenizer(long_text)["input_ids"]
    assert list((tmp_path / "runs").glob("*/events.out.tfevents.*")), "no TensorBoard log"


def test_length_buckets_hold_similar_lengths_in_random_order():
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 60, (1000,), generator=generator).tolist()
    sampler = LengthBucketSampler(16, lengths=lengths)
    torch.manual_seed(0)
    order = list(sampler)
    assert sorted(order) == list(range(1000))  # every pair once per epoch
    batches = [order[i : i + 16] for i in range(0, 1000, 16)]
    spread = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches[:-1]]
    # within a batch the lengths are close (a random batch spans ~50 of the 59 possible lengths)
    assert sorted(spread)[len(spread) // 2] <= 6
    # ... and the batches do not run longest to shortest (transformers' group_by_length does, in stretches of 50):
    # the mean length of consecutive batches goes up about as often as down
    means = [sum(lengths[i] for i in b) / len(b) for b in batches]
    ups = sum(b > a for a, b in zip(means, means[1:]))
    assert 0.3 < ups / (len(means) - 1) < 0.7
    torch.manual_seed(1)
    assert list(sampler) != order  # a new order every epoch


def test_drop_long_removes_pairs_that_do_not_fit_instead_of_truncating(libreoffice):
    tok = train_joint_tokenizer(take_subset(libreoffice["train"], 500), 300)
    raw = take_subset(libreoffice["train"], 300)
    truncated = preprocess_translation(raw, tok, max_source_length=12, max_target_length=12)
    kept = preprocess_translation(raw, tok, max_source_length=12, max_target_length=12, drop_long=True)
    whole = preprocess_translation(raw, tok, max_source_length=1024, max_target_length=1024)
    fits = [i for i, row in enumerate(whole) if len(row["input_ids"]) <= 12 and len(row["labels"]) <= 12]
    assert 0 < len(fits) < len(raw)
    assert len(kept) == len(fits) and kept["labels"] == [whole[i]["labels"] for i in fits]
    assert len(truncated) == len(raw) and max(len(x) for x in truncated["labels"]) == 12


def test_wrong_source_pairs_each_target_with_another_rows_source():
    from datasets import Dataset

    rows = Dataset.from_dict(
        {"input_ids": [[1], [2], [3], [4], [5]], "attention_mask": [[1]] * 5, "labels": [[10], [20], [30], [40], [50]]}
    )
    paired = wrong_source(rows)
    assert paired["labels"] == rows["labels"]
    assert paired["input_ids"] == [[3], [4], [5], [1], [2]]
    with pytest.raises(ValueError, match="at least 2"):
        wrong_source(rows.select([0]))


def test_train_agf_on_user_pairs_scores_only_their_splits(tmp_path):
    """`train agf --dataset` with the user's own pairs scores the user's test splits (named by file or SPLIT=PATH),
    and the embedded out-of-domain GNOME pairs only with --gnome-test."""
    from plldr_hf.training.corpus import load_translation_dataset

    pairs = load_translation_dataset("libreoffice", out_of_domain_test=False)
    folder = tmp_path / "pairs"
    folder.mkdir()
    pairs["train"].select(range(400)).to_json(folder / "train.jsonl")
    pairs["validation"].select(range(16)).to_json(folder / "validation.jsonl")
    pairs["test"].select(range(8)).to_json(folder / "test.jsonl")
    pairs["test"].select(range(8, 14)).to_json(tmp_path / "extra.jsonl")
    common = dict(dataset=[str(folder), f"news={tmp_path / 'extra.jsonl'}"], max_steps=2, eval_steps=2,
                  save_steps=2, use_cpu=True, disable_tqdm=True, report_to=["none"])  # fmt: skip
    run = train(TranslationOptions.from_name("tiny", output_dir=str(tmp_path / "run"), **common))
    assert sorted(run.scores) == ["news", "test"]
    assert (run.scores["test"]["segments"], run.scores["news"]["segments"]) == (8, 6)
    both = train(TranslationOptions.from_name("tiny", output_dir=str(tmp_path / "run2"), out_of_domain_test=True,
                                              max_test_samples=4, **common))  # fmt: skip
    assert sorted(both.scores) == ["gnome", "news", "test"]
