"""Data faults in every format the corpus readers take are one line naming the file (and the row), in memory and
streamed: empty files, truncated or damaged compression, JSON that does not parse, text values that are not text,
Parquet without its footer, CSV with an unclosed quote, too little text for one block, and a file damaged past the
part read at the start of a streamed run."""

import gzip
import json
import random

import pytest

from plldr_hf.training import TrainOptions, train
from plldr_hf.training.corpus import load_text_corpus, load_text_stream


def _text(documents=400):
    rng = random.Random(0)
    words = [f"w{i}" for i in range(3000)]
    return [" ".join(rng.choice(words) for _ in range(40)) for _ in range(documents)]


def _faults(folder):
    docs = _text()
    plain = "\n\n".join(docs).encode()
    lines = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
    return {
        "empty.txt": b"",
        "empty.jsonl": b"",
        "truncated.txt.gz": gzip.compress(plain)[:3000],
        "truncated.jsonl.gz": gzip.compress(lines)[:3000],
        "not-gzip.txt.gz": b"plain text, not gzip\n",
        "broken.jsonl": b'{"text": "to be"\n',
        "number.jsonl": b'{"text": 5}\n{"text": 6}\n',
        "other-field.jsonl": b'{"body": "to be"}\n',
        "truncated.parquet": b"PAR1\x00\x00",
        "unclosed.csv": b'text\n"to be\n',
        "no-column.csv": b"body\nto be\n",
        "latin1.txt": "caf\xe9 au lait\n".encode("latin-1"),
    }


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faults")
    files = {}
    for name, content in _faults(folder).items():
        (folder / name).write_bytes(content)
        files[name] = folder / name
    return files


@pytest.mark.parametrize("name", sorted(_faults(None)))
def test_a_damaged_file_is_named_in_memory_and_streamed(faulty, name):
    path = faulty[name]
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        load_text_corpus([str(path)])
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        train_stream, _ = load_text_stream([str(path)])
        next(iter(train_stream))


def test_a_value_that_is_not_text_past_the_first_row_is_named(tmp_path):
    path = tmp_path / "late-number.jsonl"
    path.write_text(json.dumps({"text": "to be"}) + "\n" + json.dumps({"text": 7}) + "\n")
    with pytest.raises(ValueError, match=r"a text value is int 7, not text"):
        load_text_corpus([str(path)])
    train_stream, _ = load_text_stream([str(path)], held_out_share=0.5)
    with pytest.raises(ValueError, match=r"a text value is int 7, not text"):
        list(train_stream)


def test_a_stream_too_small_for_one_validation_block_is_named(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("to be or not to be\n")
    options = TrainOptions.from_name("tiny", output_dir=str(tmp_path / "run"), dataset=[str(path)], streaming=True,
                                     max_steps=1, report_to=["none"], disable_tqdm=True)  # fmt: skip
    with pytest.raises(ValueError, match=r"tiny\.txt.*not one block of 64"):
        train(options)


def test_a_streamed_file_damaged_past_its_start_is_named(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    lines = "".join(json.dumps({"text": d}) + "\n" for d in _text(6000)).encode()
    data = gzip.compress(lines)
    (folder / "train.jsonl.gz").write_bytes(data[: len(data) // 2])
    (folder / "validation.jsonl").write_bytes(lines[:30_000])
    options = TrainOptions.from_name("tiny", output_dir=str(tmp_path / "run"), dataset=[str(folder)], streaming=True,
                                     tokenizer_sample_documents=200, max_steps=50, eval_steps=0,
                                     report_to=["none"], disable_tqdm=True)  # fmt: skip
    with pytest.raises(ValueError, match=r"train\.jsonl\.gz is damaged or truncated \(EOFError"):
        train(options)
