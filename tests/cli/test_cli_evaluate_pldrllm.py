"""`plldr-hf evaluate MODEL_DIR` on a PLDR-LLM folder: perplexity of packed blocks, checked against a direct CE."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset

from plldr_hf.cli import main
from plldr_hf.evaluation import perplexity
from tests.utils import tiny_model
from tests.utils import tiny_pldrllm_tokenizer as tiny_tokenizer


def test_evaluate_pldrllm_perplexity(tmp_path):
    text = tmp_path / "validation.txt"
    text.write_text("the cat sat on the mat and the dog ran far away\n\nthe bird sang over the hill\n" * 20)
    tokenizer = tiny_tokenizer()
    model = tiny_model(vocab_size=len(tokenizer))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    out = tmp_path / "scores.json"
    argv = ["evaluate", str(tmp_path / "model"), "--dataset", str(text), "--split", "test"]
    assert main([*argv, "--block-size", "16", "--format", "json", "--output-json", str(out)]) == 0
    scores = json.loads(out.read_text())["files"]
    assert scores["blocks"] > 0 and scores["tokens"] == scores["blocks"] * 15

    block = torch.tensor(
        [tokenizer("the cat sat on the mat and the dog ran far away [END] the bird sang")["input_ids"]]
    )
    logits = model(block).logits[:, :-1]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), block[:, 1:].reshape(-1)).item()
    direct = perplexity(model, None, Dataset.from_dict({"input_ids": block.tolist()}), batch_size=1)
    assert math.isclose(direct["cross_entropy"], ce, rel_tol=1e-5)
    assert math.isclose(direct["perplexity"], math.exp(ce), rel_tol=1e-5)


def _shards(folder, kind: str):
    """Training shards and a validation file of the embedded Shakespeare text, as Parquet or JSON lines."""
    import gzip

    from plldr_hf.training.corpus import embedded_data_path

    text = gzip.decompress(embedded_data_path("en_shakespeare", "train.txt.gz").read_bytes()).decode("utf-8")
    paragraphs = [p.strip() for p in text[:300_000].split("\n\n") if p.strip()]
    folder.mkdir()
    for i in range(2):
        rows = paragraphs[i::3]
        if kind == "parquet":
            Dataset.from_dict({"text": rows}).to_parquet(folder / f"train-{i}.parquet")
        else:
            (folder / f"train-{i}.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in rows))
    rows = paragraphs[2::3][:400]
    if kind == "parquet":
        Dataset.from_dict({"text": rows}).to_parquet(folder / "validation.parquet")
    else:
        (folder / "validation.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in rows))


@pytest.mark.parametrize("kind, streaming", [("parquet", False), ("jsonl", False), ("parquet", True)])
def test_evaluate_with_no_flags_scores_the_validation_data_the_model_was_trained_with(
    tmp_path, monkeypatch, capsys, kind, streaming
):
    workdir = tmp_path / "work"
    workdir.mkdir()
    _shards(workdir / "shards", kind)
    monkeypatch.chdir(workdir)
    flags = [
        "train",
        "pldrllm",
        "--tiny",
        "--dataset",
        f"shards/*.{kind}" if kind == "parquet" else "shards",
        "--max-steps",
        "2",
        "--eval-steps",
        "0",
        "--output-dir",
        "run",
        "--report-to",
        "none",
        "--no-progress",
    ]
    assert main([*flags, *(["--streaming", "--tokenizer-sample-documents", "200"] if streaming else [])]) == 0
    report = json.loads((workdir / "run" / "train_report.json").read_text())["scores"]["validation"]
    capsys.readouterr()
    # from another directory, with no flags but the blocks the run scored
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "scores.json"
    argv = ["evaluate", str(workdir / "run"), "--max-blocks", str(report["blocks"]), "--format", "json"]
    assert main([*argv, "--output-json", str(out)]) == 0, capsys.readouterr().err
    scores = json.loads(out.read_text())["validation"]
    assert scores["blocks"] == report["blocks"]
    assert math.isclose(scores["perplexity"], report["perplexity"], rel_tol=1e-4), (scores, report)
