"""The released PLDR-LLM task heads: tensor names, last-non-pad pooling, Trainer fine-tuning and pipelines.

Released names (the author's remote code): the decoder under `decoder`; sequence
classification `score` without bias; token classification dropout + `score` with bias; question answering
`qa_outputs` with bias.
"""

import pytest
import torch
from datasets import Dataset
from transformers import (
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    Trainer,
    TrainingArguments,
    pipeline,
)

from plldr_hf import (
    PldrllmForCausalLM,
    PldrllmForQuestionAnswering,
    PldrllmForSequenceClassification,
    PldrllmForTokenClassification,
)
from tests.utils import FIXTURES, assert_close, tiny_config


HEADS = {
    "sequence": (AutoModelForSequenceClassification, PldrllmForSequenceClassification, {"score.weight"}),
    "token": (AutoModelForTokenClassification, PldrllmForTokenClassification, {"score.weight", "score.bias"}),
    "qa": (AutoModelForQuestionAnswering, PldrllmForQuestionAnswering, {"qa_outputs.weight", "qa_outputs.bias"}),
}


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(FIXTURES / "pldrllm_released")


def _config(**overrides):
    labels = {"id2label": {0: "NEG", 1: "POS"}, "label2id": {"NEG": 0, "POS": 1}}
    return tiny_config(vocab_size=32000, max_position_embeddings=128, **labels, **overrides)


@pytest.mark.parametrize("head", list(HEADS))
def test_heads_have_the_released_tensor_names_and_auto_classes(head, tmp_path):
    auto, cls, head_keys = HEADS[head]
    model = auto.from_config(_config())
    assert type(model) is cls
    decoder_keys = {k for k in PldrllmForCausalLM(_config()).state_dict() if k.startswith("decoder.")}
    assert set(model.state_dict()) == decoder_keys | head_keys
    model.save_pretrained(tmp_path)
    reloaded, info = auto.from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info.values())
    assert (tmp_path / "modeling_pldrllm.py").is_file()


def test_sequence_classification_pools_the_last_real_token_under_either_padding():
    model = PldrllmForSequenceClassification(_config(custom_G_type="identity")).eval()
    ids = torch.tensor([[7, 8, 9, 10]])
    alone = model(ids).logits
    short = torch.tensor([[7, 8, 9]])
    with torch.no_grad():
        right = model(
            torch.tensor([[7, 8, 9, 10], [7, 8, 9, 0]]), attention_mask=torch.tensor([[1] * 4, [1, 1, 1, 0]])
        )
        left = model(torch.tensor([[0, 7, 8, 9]]), attention_mask=torch.tensor([[0, 1, 1, 1]]))
        # without a mask, the last token that is not pad_token_id (released behaviour)
        no_mask = model(torch.tensor([[7, 8, 9, 0]]))
        assert_close("row 0 of a right-padded batch", alone[0], right.logits[0])
        assert_close("right-padded row", model(short).logits[0], right.logits[1])
        assert_close("left-padded row", model(short).logits[0], left.logits[0])
        assert_close("unmasked pad", model(short).logits[0], no_mask.logits[0])


def _train(model, dataset, tmp_path, steps=25):
    args = TrainingArguments(
        str(tmp_path),
        max_steps=steps,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=dataset)
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return losses


def _first_last(losses, n=5):
    return sum(losses[:n]) / n, sum(losses[-n:]) / n


def test_sequence_classification_trains_and_runs_in_its_pipeline(tokenizer, tmp_path):
    # language identification of the embedded LibreOffice pairs: a balanced two-class task on local data
    from plldr_hf.training.corpus import load_translation_dataset

    pairs = load_translation_dataset("libreoffice")["validation"].select(range(16))
    texts = [p["en"] for p in pairs["translation"]] + [p["de"] for p in pairs["translation"]]
    labels = [0] * 16 + [1] * 16
    enc = tokenizer(texts, truncation=True, max_length=24, padding="max_length")
    dataset = Dataset.from_dict({**enc, "labels": labels})
    model = PldrllmForSequenceClassification(_config())
    first, last = _first_last(_train(model, dataset, tmp_path))
    assert last < 0.5 * first, (first, last)
    classifier = pipeline("text-classification", model=model.eval(), tokenizer=tokenizer)
    out = classifier(["Click the button.", "Klicken Sie auf die Schaltfläche."])
    assert [o["label"] in ("NEG", "POS") for o in out] == [True, True]


def test_token_classification_trains_and_runs_in_its_pipeline(tokenizer, tmp_path):
    # tag the digit pieces of a sentence (split_digits: every digit is a piece)
    texts = [f"Seite {i} von {i * 7} im Kapitel {i % 5}" for i in range(32)]
    enc = tokenizer(texts, padding="max_length", max_length=16)
    digit_ids = set(tokenizer.convert_tokens_to_ids(list("0123456789")))
    labels = [
        [(1 if t in digit_ids else 0) if m else -100 for t, m in zip(ids, mask)]
        for ids, mask in zip(enc["input_ids"], enc["attention_mask"])
    ]
    dataset = Dataset.from_dict({**enc, "labels": labels})
    model = PldrllmForTokenClassification(_config())
    first, last = _first_last(_train(model, dataset, tmp_path))
    assert last < 0.5 * first, (first, last)
    tagger = pipeline("token-classification", model=model.eval(), tokenizer=tokenizer)
    entities = tagger("Seite 12 von 84")
    assert all({"entity", "score", "word", "start", "end"} <= set(e) for e in entities)


def test_question_answering_trains_and_runs_in_its_pipeline(tokenizer, tmp_path):
    # answer = the number in the context; positions found through the offsets of a fast tokenizer
    rows = {"input_ids": [], "attention_mask": [], "start_positions": [], "end_positions": []}
    for i in range(32):
        question, context = "Welche Seite?", f"Das steht auf Seite {10 + i} im Handbuch."
        enc = tokenizer(question, context, padding="max_length", max_length=32, return_offsets_mapping=True)
        answer_start = context.index(str(10 + i))
        seq = enc.sequence_ids()
        tokens = [
            k
            for k, (s, e) in enumerate(enc["offset_mapping"])
            if seq[k] == 1 and s >= answer_start and e <= answer_start + 2 and e > s
        ]
        rows["input_ids"].append(enc["input_ids"])
        rows["attention_mask"].append(enc["attention_mask"])
        rows["start_positions"].append(tokens[0])
        rows["end_positions"].append(tokens[-1])
    model = PldrllmForQuestionAnswering(_config())
    first, last = _first_last(_train(model, Dataset.from_dict(rows), tmp_path, steps=30))
    assert last < 0.6 * first, (first, last)
    answerer = pipeline("question-answering", model=model.eval(), tokenizer=tokenizer)
    answer = answerer(question="Welche Seite?", context="Das steht auf Seite 42 im Handbuch.")
    assert {"answer", "score", "start", "end"} <= set(answer)
    context = "Das steht auf Seite 42 im Handbuch."
    assert answer["answer"] == context[answer["start"] : answer["end"]].strip() and 0 < answer["score"] <= 1


def test_classifier_example_runs(tmp_path, capsys):
    import runpy

    from tests.utils import REPO_ROOT

    example = runpy.run_path(str(REPO_ROOT / "examples" / "finetune_pldrllm_classifier.py"))
    assert example["main"](["--tiny", "--output-dir", str(tmp_path / "langid")]) == 0
    out = capsys.readouterr().out
    accuracy = float(out.split("validation accuracy: ")[1].split()[0])
    assert 0.0 <= accuracy <= 1.0 and "→" in out
    assert AutoModelForSequenceClassification.from_pretrained(tmp_path / "langid").config.num_labels == 2


def test_text_generation_pipeline_on_a_released_format_folder(tmp_path):
    """config + weights in the released format next to the released tokenizer files, as users download them."""
    import shutil

    folder = tmp_path / "released"
    PldrllmForCausalLM(_config()).save_pretrained(folder)
    for name in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(FIXTURES / "pldrllm_released" / name, folder / name)
    generator = pipeline("text-generation", model=str(folder))
    assert type(generator.tokenizer).__name__ == "PldrllmTokenizer"
    out = generator("Es war einmal", max_new_tokens=5, do_sample=False)
    assert out[0]["generated_text"].startswith("Es war einmal") and len(out[0]["generated_text"]) > len(
        "Es war einmal"
    )
