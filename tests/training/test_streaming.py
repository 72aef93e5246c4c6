"""Streamed pretraining (`--streaming`): documents read as training consumes them, each process of a distributed run
reading its own shards, and a run killed mid-stream resuming to the uninterrupted run's losses bit for bit."""

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plldr_hf.training import TrainOptions, train
from plldr_hf.training.causal_lm import language_model_data
from plldr_hf.training.corpus import held_out, load_text_corpus, load_text_stream
from tests.utils import REPO_ROOT


WORKER = REPO_ROOT / "tests" / "training" / "stream_worker.py"


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """4 Parquet shards of numbered documents ("document ID: text"; Shakespeare paragraphs), and a validation file."""
    folder = tmp_path_factory.mktemp("shards")
    texts = load_text_corpus()["train"]["text"][:480]
    for k in range(4):
        rows = [{"text": f"document {i}: {texts[i]}"} for i in range(k, 400, 4)]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"shard-{k}.parquet")
    rows = [{"text": f"document {i}: {texts[i]}"} for i in range(400, 480)]
    pq.write_table(pa.Table.from_pylist(rows), folder / "validation.parquet")
    return folder


def _torchrun(*args, check=True):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone", str(WORKER)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([*command, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def _losses(folder):
    history = json.loads((folder / "log_history.json").read_text())
    return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}


def test_two_processes_read_disjoint_shards_and_a_killed_run_resumes_bit_for_bit(shards, tmp_path):
    whole = tmp_path / "whole"
    _torchrun(shards, whole)
    seen = [set(json.loads((whole / f"documents.rank{rank}.json").read_text())) for rank in (0, 1)]
    # each process read whole shards of its own: no document twice, none left out
    assert seen[0] and seen[1] and not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(400))
    assert {i % 4 for i in seen[0]}.isdisjoint({i % 4 for i in seen[1]})

    # killed when step 7 begins (checkpoint-6 on disk), then --resume: the same losses, bit for bit
    crashed = tmp_path / "crashed"
    assert _torchrun(shards, crashed, "--kill-at", 7, check=False).returncode != 0
    assert (crashed / "checkpoint-6").is_dir() and not (crashed / "train_report.json").exists()
    _torchrun(shards, crashed, "--resume")
    expected, resumed = _losses(whole), _losses(crashed)
    assert sorted(resumed) == sorted(expected) == list(range(1, 17))
    assert all(resumed[step] == expected[step] for step in expected), (expected, resumed)


def test_a_stream_without_validation_files_holds_out_documents_by_a_rule_of_their_text(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    texts = [f"line {i} of a streamed corpus, and then some words" for i in range(2000)]
    (folder / "part-0.txt").write_text("\n\n".join(texts[:1000]) + "\n")
    (folder / "part-1.txt").write_text("\n\n".join(texts[1000:]) + "\n")
    train_docs, validation_docs = load_text_stream([str(folder / "*.txt")], held_out_share=0.05)
    assert train_docs.n_shards == 2
    training = [row["text"] for row in train_docs]
    held = [row["text"] for row in validation_docs]
    assert sorted(training + held) == sorted(texts) and not set(training) & set(held)
    assert 40 < len(held) < 180 and all(held_out(text, 0.05) for text in held)


def test_streamed_training_packs_like_the_in_memory_path_and_reports_tokens_seen(shards, tmp_path):
    from datasets import Dataset

    from plldr_hf.training.preprocessing import pack_into_blocks

    data = [str(shards / "shard-0.parquet"), str(shards / "validation.parquet")]
    options = TrainOptions.from_name(
        "tiny",
        output_dir=str(tmp_path),
        dataset=data,
        streaming=True,
        max_train_documents=None,
        block_size=64,
        per_device_train_batch_size=4,
        max_steps=6,
        eval_steps=0,
        logging_steps=1,
        report_to=["none"],
        disable_tqdm=True,
    )
    report = train(options)
    assert report.train_examples is None and report.global_step == 6 and report.scores["validation"]["blocks"] > 0
    tokens = [entry["num_input_tokens_seen"] for entry in report.log_history if "loss" in entry]
    assert tokens == [64 * 4 * step for step in range(1, 7)]
    # the stream's blocks are those of the in-memory packing of the same documents (1,000 documents at a time)
    data = language_model_data(options, report.tokenizer)
    documents = Dataset.from_parquet(data_files := str(shards / "shard-0.parquet"))
    expected = pack_into_blocks(documents, report.tokenizer, 64)["input_ids"]
    assert [row["input_ids"] for row in data.train] == expected, data_files
