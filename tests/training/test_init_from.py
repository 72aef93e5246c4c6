"""Fine-tuning from an existing model (`init_from`, `--init-from`), whole or with LoRA, for both families: the model
improves on the user's data, keeps the base model's tokenizer, and the output folder loads as a plain model."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

from plldr_hf.evaluation import perplexity
from plldr_hf.training import TrainOptions, TranslationOptions, train
from plldr_hf.training.preprocessing import pack_into_blocks
from plldr_hf.training.translation_trainer import evaluate_translation


QUIET = dict(report_to=["none"], disable_tqdm=True)


@pytest.fixture(scope="module")
def pldr_base(tmp_path_factory):
    out = tmp_path_factory.mktemp("pldr_base")
    train(TrainOptions.from_name("tiny", output_dir=str(out), max_steps=4, eval_steps=0, **QUIET))
    return out


@pytest.fixture(scope="module")
def user_text(tmp_path_factory):
    # the user's own corpus: a register the Shakespeare base has never seen
    folder = tmp_path_factory.mktemp("user_text")
    lines = [f"order {i} shipped to warehouse {i % 7} on monday; invoice {i * 3} paid." for i in range(400)]
    (folder / "train.txt").write_text("\n\n".join(lines[:360]) + "\n")
    (folder / "validation.txt").write_text("\n\n".join(lines[360:]) + "\n")
    return [str(folder / "train.txt"), str(folder / "validation.txt")]


def _validation_perplexity(folder, tokenizer, files):
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    text = open(files[1]).read().split("\n\n")
    from datasets import Dataset

    blocks = pack_into_blocks(Dataset.from_dict({"text": text}), tokenizer, 32)
    return perplexity(model, tokenizer, blocks, batch_size=8)["perplexity"]


@pytest.mark.parametrize("lora_r", [None, 4], ids=["full", "lora"])
def test_pldrllm_fine_tunes_from_a_saved_folder(pldr_base, user_text, tmp_path, lora_r):
    base_tokenizer = AutoTokenizer.from_pretrained(pldr_base)
    before = _validation_perplexity(pldr_base, base_tokenizer, user_text)
    options = TrainOptions.from_name(
        "tiny",
        output_dir=str(tmp_path),
        init_from=str(pldr_base),
        lora_r=lora_r,
        dataset=user_text,
        block_size=32,
        max_steps=30,
        learning_rate=3e-3 if lora_r is None else 1e-2,
        eval_steps=0,
        **QUIET,
    )
    report = train(options)
    assert report.options["init_from"] == str(pldr_base) and report.global_step == 30
    # the base model's tokenizer, unchanged (no tokenizer was trained on the user's text)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert tokenizer.get_vocab() == base_tokenizer.get_vocab() and report.vocab_size == len(base_tokenizer)
    after = _validation_perplexity(tmp_path, tokenizer, user_text)
    assert after < 0.8 * before, (before, after)
    assert not (tmp_path / "adapter_config.json").exists()  # the folder is a plain model, not an adapter
    tuned, base = load_file(tmp_path / "model.safetensors"), load_file(pldr_base / "model.safetensors")
    changed = {name for name in base if not torch.equal(base[name], tuned[name])}
    if lora_r is None:
        assert any(".mlp." in name or "ffn" in name or "reslayerA" in name for name in changed), sorted(changed)[:5]
    else:
        # LoRA adapted the family's default modules only (the query and value projections), merged at the end
        assert changed and all(name.endswith(("wq.weight", "wv.weight")) for name in changed), sorted(changed)
        adapter = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
        assert adapter["r"] == 4 and sorted(adapter["target_modules"]) == ["wq", "wv"]


def test_init_from_refuses_what_cannot_work(pldr_base, tmp_path):
    with pytest.raises(ValueError, match="--lora-r adapts an existing model"):
        TrainOptions(lora_r=4)
    with pytest.raises(ValueError, match="drop --tokenizer"):
        TrainOptions(init_from=str(pldr_base), tokenizer=str(pldr_base))
    with pytest.raises(ValueError, match="llama baseline trains from scratch"):
        TrainOptions(init_from=str(pldr_base), architecture="llama")
    with pytest.raises(ValueError, match="exceeds the 64 positions"):
        train(TrainOptions.from_name("tiny", output_dir=str(tmp_path), init_from=str(pldr_base), block_size=128))
    with pytest.raises(ValueError, match="this command needs an AGF|holds a 'pldrllm' model"):
        train(TranslationOptions.from_name("tiny", output_dir=str(tmp_path / "agf"), init_from=str(pldr_base)))


@pytest.fixture(scope="module")
def agf_base(tmp_path_factory):
    out = tmp_path_factory.mktemp("agf_base")
    train(
        TranslationOptions.from_name("tiny", output_dir=str(out), max_steps=20, test_splits=(), use_cpu=True, **QUIET)
    )
    return out


@pytest.fixture(scope="module")
def user_pairs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user_pairs")
    pairs = [{"en": f"Invoice {i} is paid.", "de": f"Rechnung {i} ist bezahlt."} for i in range(240)]
    for split, rows in (("train", pairs[:200]), ("validation", pairs[200:220]), ("test", pairs[220:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return [str(folder / f"{split}.jsonl") for split in ("train", "validation", "test")]


@pytest.mark.parametrize("lora_r", [None, 8], ids=["full", "lora"])
def test_agf_fine_tunes_from_a_saved_folder(agf_base, user_pairs, tmp_path, lora_r):
    from datasets import load_dataset

    test = load_dataset("json", data_files=user_pairs[2], split="train")
    test = test.map(lambda row: {"translation": {"en": row["en"], "de": row["de"]}}, remove_columns=["en", "de"])
    base_tokenizer = AutoTokenizer.from_pretrained(agf_base)

    def test_loss(folder):
        model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
        return evaluate_translation(model, tokenizer, test, batch_size=20, generate=False, disable_tqdm=True)["loss"]

    options = TranslationOptions.from_name(
        "tiny",
        output_dir=str(tmp_path),
        init_from=str(agf_base),
        lora_r=lora_r,
        dataset=user_pairs,
        max_steps=80,
        learning_rate=1e-2 if lora_r is None else 2e-2,
        test_splits=("test",),
        use_cpu=True,
        **QUIET,
    )
    report = train(options)
    assert report.global_step == 80 and set(report.scores) == {"test"}
    assert AutoTokenizer.from_pretrained(tmp_path).get_vocab() == base_tokenizer.get_vocab()
    before, after = test_loss(agf_base), test_loss(tmp_path)
    # measured: 5.32 → 0.70 (full), 5.32 → 5.07 (LoRA on q and v of a 32-wide model)
    assert after < before - (2.0 if lora_r is None else 0.15), (before, after)
    assert report.scores["test"]["loss"] == pytest.approx(after, rel=1e-4)
    assert not (tmp_path / "adapter_config.json").exists()
    if lora_r is not None:
        adapter = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
        assert adapter["r"] == 8 and sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]


def test_a_fine_tune_keeps_the_base_runs_blocks_and_reports_perplexity_before_and_after(tmp_path, user_text):
    from plldr_hf.cli import main

    base = tmp_path / "base"
    train(TrainOptions.from_name("tiny", output_dir=str(base), block_size=32, max_steps=2, eval_steps=0, **QUIET))
    out = tmp_path / "tuned"
    argv = ["train", "pldrllm", "--tiny", "--init-from", str(base), "--dataset", *user_text, "--max-steps", "20",
            "--learning-rate", "3e-3", "--eval-steps", "0", "--report-to", "none", "--no-progress",
            "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((out / "train_report.json").read_text())
    # the base run's 32-token blocks, not the tiny preset's 64
    assert report["options"]["block_size"] == 32 and report["scores"]["validation"]["tokens_per_block"] == 32
    validation = report["scores"]["validation"]
    assert validation["perplexity"] < validation["perplexity_before"]
    # the report's perplexity is what `plldr-hf evaluate` of the result gives on the same blocks
    scores = tmp_path / "scores.json"
    assert main(["evaluate", str(out), "--max-blocks", str(validation["blocks"]), "--format", "json",
                 "--output-json", str(scores)]) == 0  # fmt: skip
    assert json.loads(scores.read_text())["validation"]["perplexity"] == pytest.approx(
        validation["perplexity"], rel=1e-4
    )
