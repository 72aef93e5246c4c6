"""lm-evaluation-harness on PLDR-LLM: per-choice log-likelihoods do not depend on the batch size.

lm-eval right-pads each batch with id 0 and passes no attention mask; the model derives the mask from the pad id,
so pads stay out of the Gram matrix. The task is local (`plldr_hf.models.pldrllm.lm_eval_task`), nothing is downloaded.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest


lm_eval = pytest.importorskip("lm_eval", reason="lm_eval is part of the dev extra (pip install -e '.[dev]')")

from lm_eval.models.huggingface import HFLM  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from plldr_hf.models.pldrllm.lm_eval_task import write_continuation_task  # noqa: E402
from plldr_hf.training.corpus import load_text_corpus  # noqa: E402
from tests.utils import tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm_eval_task")
    documents = load_text_corpus()["validation"]["text"]
    return folder, write_continuation_task(folder, documents, num_questions=40)


@pytest.fixture(scope="module")
def tokenizer():
    from plldr_hf.training.corpus import load_text_corpus
    from plldr_hf.training.tokenizers import train_sentencepiece_tokenizer

    return train_sentencepiece_tokenizer(load_text_corpus()["train"], vocab_size=600, max_documents=3000)


def _loglikelihoods(model, tokenizer, task, batch_size) -> np.ndarray:
    folder, name = task
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device="cpu")
    out = lm_eval.simple_evaluate(
        model=lm, tasks=[name], task_manager=TaskManager(include_path=str(folder)), log_samples=True, bootstrap_iters=0
    )
    return np.array([resp[0] for sample in out["samples"][name] for resp in sample["filtered_resps"]])


@pytest.mark.parametrize("collapsed", [False, True], ids=["learned_G", "collapsed"])
def test_loglikelihoods_equal_at_batch_1_and_16(task, tokenizer, collapsed):
    model = tiny_model(vocab_size=len(tokenizer), max_position_embeddings=128)
    if collapsed:
        model.collapse(force=True)
    one, sixteen = _loglikelihoods(model, tokenizer, task, 1), _loglikelihoods(model, tokenizer, task, 16)
    assert len(one) == 160
    assert np.abs(one - sixteen).max() <= 1e-4


def test_reference_padding_shows_the_batch_dependence(task, tokenizer):
    # the reference's behaviour (pads inside the Gram matrix) is what made batch 16 differ from batch 1
    model = tiny_model(vocab_size=len(tokenizer), max_position_embeddings=128, reference_padding=True)
    one, sixteen = _loglikelihoods(model, tokenizer, task, 1), _loglikelihoods(model, tokenizer, task, 16)
    assert np.abs(one - sixteen).max() > 1e-2


def test_lm_eval_command_line_on_a_saved_folder(task, tokenizer, tmp_path):
    """`lm_eval --model hf` in a process without `import plldr_hf`: the saved folder's remote code runs."""
    model = tiny_model(vocab_size=len(tokenizer), max_position_embeddings=128)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    expected = _loglikelihoods(model, tokenizer, task, 1)
    original, name = task
    # the task folder moved, and lm_eval run from another working directory: its data path is relative to the YAML
    task_folder = tmp_path / "moved_task"
    shutil.copytree(original, task_folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={folder},trust_remote_code=True,dtype=float32",
            "--tasks",
            name,
            "--include_path",
            str(task_folder),
            "--device",
            "cpu",
            "--batch_size",
            "16",
            "--log_samples",
            "--output_path",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=elsewhere,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the metrics name their aggregation and direction (lm-eval warns about each one that does not)
    assert "higher_is_better" not in proc.stderr and "aggregation" not in proc.stderr, proc.stderr[-3000:]
    samples = sorted(out.rglob(f"samples_{name}_*.jsonl"))
    assert samples, list(out.rglob("*"))
    rows = [json.loads(line) for line in samples[0].read_text().splitlines()]
    rows.sort(key=lambda r: r["doc_id"])
    got = np.array([float(resp[0]) for row in rows for resp in row["filtered_resps"]])
    # the folder loads with SDPA attention, the in-process model runs eager: sums of ≈ 60 token log-probabilities
    # then agree to float32 rounding (measured 4.7e-4 absolute, 6e-6 relative)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-4)


def test_the_task_folder_names_no_absolute_path_and_choices_follow_one_space(task, tokenizer):
    folder, name = task
    for path in folder.iterdir():
        assert str(folder) not in path.read_text(encoding="utf-8"), path.name
    lm = HFLM(pretrained=tiny_model(vocab_size=len(tokenizer), max_position_embeddings=128), tokenizer=tokenizer)
    out = lm_eval.simple_evaluate(
        model=lm, tasks=[name], task_manager=TaskManager(include_path=str(folder)), log_samples=True, limit=5
    )
    for sample in out["samples"][name]:
        for context, continuation in sample["arguments"]:
            # lm-eval's target_delimiter is the only space between the two halves of the line
            assert not context.endswith(" ") and continuation.startswith(" ") and not continuation.startswith("  ")
            line = sample["doc"]["question"] + continuation
            assert "  " not in line


def test_the_papers_suite_is_a_group_lm_eval_resolves_offline(tmp_path, capsys):
    # lm-eval's TaskManager indexes the written folder next to its own tasks: the group and each of its eight tasks
    # are found (their data comes from the Hub when run; indexing needs none)
    import yaml
    from lm_eval.tasks import TaskManager

    from plldr_hf.cli import main
    from plldr_hf.models.pldrllm.lm_eval_task import PAPERS_TASKS, SUITE_NAME

    out = tmp_path / "suite"
    assert main(["lm-eval-task", str(out), "--suite", "papers"]) == 0
    assert f"wrote task group {SUITE_NAME}" in capsys.readouterr().out
    manager = TaskManager(include_path=str(out))
    assert SUITE_NAME in manager.all_groups
    assert set(PAPERS_TASKS) <= set(manager.all_tasks)
    group = yaml.safe_load((out / f"{SUITE_NAME}.yaml").read_text())
    assert [entry["task"] for entry in group["task"]] == list(PAPERS_TASKS)
    assert {entry["num_fewshot"] for entry in group["task"]} == {0}
    assert len(PAPERS_TASKS) == 8
    assert main(["lm-eval-task", str(tmp_path / "x"), "--suite", "papers", "--dataset", "a.txt"]) == 2
