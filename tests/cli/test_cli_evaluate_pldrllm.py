"""`plldr-hf evaluate MODEL_DIR` on a PLDR-LLM folder: perplexity of packed blocks, checked against a direct CE."""

import json
import math

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
