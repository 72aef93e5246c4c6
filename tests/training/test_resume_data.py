"""Resume knows its data: a run records what it read (`data_fingerprint.json`), and a resume over files added,
removed or rewritten, or over a stream where the run read into memory, is refused with the difference named, unless
`--allow-data-change` says it is intended."""

import gzip
import shutil

import pytest

from plldr_hf.cli import main
from plldr_hf.training import TrainOptions, train
from plldr_hf.training.corpus import embedded_data_path


QUIET = dict(report_to=["none"], disable_tqdm=True)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny run on a folder of two text files, with a checkpoint at step 2."""
    root = tmp_path_factory.mktemp("resume_data")
    data = root / "corpus"
    data.mkdir()
    text = gzip.decompress(embedded_data_path("en_shakespeare", "train.txt.gz").read_bytes()).decode("utf-8")
    text = text[:200_000]
    half = len(text) // 2
    (data / "a.txt").write_text(text[:half], encoding="utf-8")
    (data / "b.txt").write_text(text[half:], encoding="utf-8")
    out = root / "run"
    options = TrainOptions.from_name("tiny", output_dir=str(out), dataset=[str(data)], max_steps=2, save_steps=2,
                                     eval_steps=0, **QUIET)  # fmt: skip
    train(options)
    assert (out / "checkpoint-2").is_dir() and (out / "data_fingerprint.json").is_file()
    return data, out, options


def _resume(options, **changes):
    import dataclasses

    return train(dataclasses.replace(options, resume_from_checkpoint="last", max_steps=3, **changes))


def test_resume_over_added_removed_or_rewritten_files_is_refused_with_the_difference(run, tmp_path):
    data, out, options = run
    (data / "c.txt").write_text("A new play.\n\nWith new lines.\n", encoding="utf-8")
    try:
        with pytest.raises(ValueError, match=r"the data differs .*c\.txt added.*--allow-data-change"):
            _resume(options)
    finally:
        (data / "c.txt").unlink()
    moved = tmp_path / "b.txt"
    shutil.move(data / "b.txt", moved)
    try:
        with pytest.raises(ValueError, match=r"b\.txt removed"):
            _resume(options)
    finally:
        shutil.move(moved, data / "b.txt")
    original = (data / "a.txt").read_text(encoding="utf-8")
    (data / "a.txt").write_text(original + "\nMore.\n", encoding="utf-8")
    try:
        with pytest.raises(ValueError, match=r"a\.txt rewritten"):
            _resume(options)
    finally:
        (data / "a.txt").write_text(original, encoding="utf-8")


def test_resume_streamed_over_a_run_read_into_memory_is_refused(run, capsys):
    data, out, options = run
    argv = ["train", "pldrllm", "--tiny", "--dataset", str(data), "--output-dir", str(out), "--resume",
            "--streaming", "--max-steps", "3", "--report-to", "none", "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "streaming=True differs from the run being resumed" in err and "Traceback" not in err


def test_allow_data_change_resumes_and_records_the_new_data(run, caplog):
    data, out, options = run
    (data / "c.txt").write_text("A new play.\n\nWith new lines.\n", encoding="utf-8")
    try:
        report = _resume(options, allow_data_change=True)
    finally:
        (data / "c.txt").unlink()
    assert report.global_step == 3
    assert "c.txt added" in caplog.text
    assert "c.txt" in (out / "data_fingerprint.json").read_text()


def test_resume_with_another_model_setting_is_refused_even_with_allow_data_change(run):
    data, out, options = run
    with pytest.raises(ValueError, match=r"block_size=16 differs from the run being resumed \(64 in"):
        _resume(options, block_size=16, allow_data_change=True)


def test_a_translation_resume_knows_its_position_encoding(tmp_path):
    """Both families record the settings a resume must share: a translator resumed with another position encoding
    is refused before anything is built (it would load weights of another model)."""
    from plldr_hf.training import TranslationOptions
    from plldr_hf.training.start import check_data_unchanged

    options = TranslationOptions.from_name("tiny", output_dir=str(tmp_path), **QUIET)
    check_data_unchanged(tmp_path, options, resuming=False)
    check_data_unchanged(tmp_path, options, resuming=True)  # the same run resumes
    other = TranslationOptions.from_name("tiny", output_dir=str(tmp_path), position_encoding="rope", **QUIET)
    with pytest.raises(ValueError, match=r"position_encoding='rope' differs from the run being resumed \('agf'"):
        check_data_unchanged(tmp_path, other, resuming=True)


def test_the_llama_baseline_resumes_from_its_checkpoint(tmp_path):
    """The baseline's checkpoints are checked for completeness, not refused as another family's model."""
    options = TrainOptions.from_name("tiny", architecture="llama", output_dir=str(tmp_path), max_steps=2,
                                     save_steps=2, eval_steps=0, **QUIET)  # fmt: skip
    train(options)
    assert _resume(options).global_step == 3
