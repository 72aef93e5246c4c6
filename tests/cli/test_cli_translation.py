"""`plldr-hf train agf`, `plldr-hf evaluate` and `plldr-hf translate`, run in-process on CPU with tiny settings."""

import dataclasses
import io
import json
import re

import pytest

from plldr_hf.cli import build_parser, main


TRAIN = [
    "train", "agf", "--tiny", "--position", "rope", "--max-steps", "6", "--eval-steps", "3", "--save-steps", "3",
    "--logging-steps", "3", "--max-eval-samples", "8", "--max-test-samples", "8", "--no-progress",
]  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("agf_cli")
    assert main([*TRAIN, "--output-dir", str(out)]) == 0
    return out


def test_help_lists_the_translation_commands(capsys):
    from plldr_hf.models.agf.configuration_agf import POSITION_ENCODINGS
    from plldr_hf.training.options import TranslationOptions
    from plldr_hf_cli.commands.train import options_of

    with pytest.raises(SystemExit):
        main(["train", "agf", "--help"])
    text = capsys.readouterr().out
    for flag in ("--position", "--pcmv", "--dataset", "--max-steps", "--resume", "--tiny"):
        assert flag in text
    options = options_of("agf", ["--position", "kerple_log", "--pcmv", "--dataset", "a.jsonl", "b.jsonl"])[0]
    assert (options.position_encoding, options.pcmv, options.dataset) == ("kerple_log", True, ["a.jsonl", "b.jsonl"])
    # the options take the registry's names
    position = next(spec for spec in dataclasses.fields(TranslationOptions) if spec.name == "position_encoding")
    assert position.metadata["choices"] == tuple(POSITION_ENCODINGS)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train"])
    assert "FAMILY" in capsys.readouterr().err


def test_train_writes_a_complete_model_folder(trained):
    config = json.loads((trained / "config.json").read_text())
    assert config["model_type"] == "agf" and config["position_encoding"] == "rope" and not config["pcmv"]
    for name in ("model.safetensors", "tokenizer.json", "generation_config.json", "test_results.json"):
        assert (trained / name).is_file(), name
    assert (trained / "checkpoint-6").is_dir()
    state = json.loads((trained / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    assert [h["step"] for h in state["log_history"] if "eval_bleu" in h] == [3, 6]


def test_evaluate_reproduces_the_training_scores(trained, tmp_path, capsys):
    out = tmp_path / "scores.json"
    argv = ["evaluate", str(trained), "--split", "test", "gnome", "--max-samples", "8", "--format", "json"]
    argv += ["--max-source-length", "32", "--max-target-length", "32", "--output-json", str(out)]
    argv += ["--hypotheses", str(tmp_path / "hyps.txt")]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    # same fixed 8-segment subset, same greedy decoding as the scoring at the end of training
    at_training = json.loads((trained / "test_results.json").read_text())
    for key in ("bleu", "chrf", "accuracy", "target_tokens", "bleu_signature", "chrf_signature"):
        assert printed["test"][key] == pytest.approx(at_training[key]), key
    assert printed["gnome"]["segments"] == 8
    assert len((tmp_path / "hyps.test.txt").read_text(encoding="utf-8").splitlines()) == 8

    # the default scores the in-domain test split only, and says how to score more
    assert main(["evaluate", str(trained), "--max-samples", "4", "--max-target-length", "32"]) == 0
    table = capsys.readouterr().out
    assert "BLEU" in table and "nrefs:1|case:mixed" in table and "accuracy" in table
    assert "— test (4 segments)" in table and "— gnome" not in table
    assert "also available: --split test" in table and "gnome" in table.splitlines()[-1]


def test_translate_arguments_and_stdin(trained, capsys, monkeypatch):
    assert main(["translate", str(trained), "Click OK.", "Open the file.", "--max-new-tokens", "8"]) == 0
    after = capsys.readouterr().out.splitlines()
    assert len(after) == 2
    # options before the texts give the same lines (argparse alone would call the texts unrecognized)
    assert main(["translate", str(trained), "--max-new-tokens", "8", "Click OK.", "Open the file."]) == 0
    assert capsys.readouterr().out.splitlines() == after
    monkeypatch.setattr("sys.stdin", io.StringIO("Save the document.\nClose the window.\nQuit.\n"))
    assert main(["translate", str(trained), "--max-new-tokens", "8"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_resume_continues_from_the_last_checkpoint(trained):
    # tag the last checkpoint's state: a resumed run carries its log history on, a fresh start would not
    state_file = trained / "checkpoint-6" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["log_history"].append({"resume_marker": 1.0, "step": 6})
    state_file.write_text(json.dumps(state))

    assert main([*TRAIN, "--output-dir", str(trained), "--max-steps", "8", "--resume"]) == 0
    state = json.loads((trained / "trainer_state.json").read_text())
    assert state["global_step"] == 8
    assert any("resume_marker" in h for h in state["log_history"]), "did not resume from checkpoint-6"


def test_clear_errors(tmp_path, capsys):
    def one_line(argv, pattern):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and re.search(pattern, err), err

    one_line(["translate", str(tmp_path / "missing"), "hello"], "plldr-hf translate: error: .*does not exist")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    one_line(["evaluate", str(tmp_path)], "no evaluation for model_type 'bert'.*supported: .*agf")
    one_line(["translate", str(tmp_path), "hello"], "translation needs an agf model")
    assert main([*TRAIN, "--output-dir", str(tmp_path / "fresh"), "--resume"]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "fresh").exists()


def _write_wmt17_copy(folder, pairs_by_split):
    """A local copy of the Hub dataset `wmt/wmt17` (config de-en): its file names, split names and Arrow schema
    (one struct column `translation` with fields `de`, `en`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("translation", pa.struct([("de", pa.string()), ("en", pa.string())]))])
    (folder / "de-en").mkdir(parents=True)
    for split, shards in pairs_by_split.items():
        for index, pairs in enumerate(shards):
            table = pa.table({"translation": [{"de": de, "en": en} for en, de in pairs]}, schema=schema)
            pq.write_table(table, folder / "de-en" / f"{split}-{index:05d}-of-{len(shards):05d}.parquet")


def test_wmt17_recipe_offline_from_a_local_copy_of_the_hub_dataset(tmp_path, libreoffice_pairs):
    from plldr_hf_cli.commands.train import options_of

    # the recipe a GPU user runs: base size, WMT-sized vocabulary, ~8k-token batches, beam 4 with length penalty
    opts = options_of("agf", ["--dataset", "wmt17", "--size", "base"])[0]
    assert (opts.size, opts.vocab_size, opts.per_device_train_batch_size, opts.warmup_steps) == (
        "base",
        32000,
        256,
        4000,
    )
    assert (opts.num_beams, opts.length_penalty) == (4, 0.6)
    # an explicit flag still wins over the dataset's defaults
    assert options_of("agf", ["--dataset", "wmt17", "--num-beams", "2"])[0].num_beams == 2

    train = libreoffice_pairs[:1200]
    copy = tmp_path / "wmt17"
    _write_wmt17_copy(
        copy, {"train": [train[:600], train[600:]], "validation": [libreoffice_pairs[1200:1230]],
               "test": [libreoffice_pairs[1230:1250]]}
    )  # fmt: skip
    out = tmp_path / "run"
    argv = ["train", "agf", "--dataset", "wmt17", "--wmt17-dir", str(copy), "--tiny", "--max-steps", "4"]
    argv += ["--eval-steps", "4", "--save-steps", "4", "--num-beams", "2", "--length-penalty", "0.6"]
    argv += ["--max-test-samples", "20", "--no-progress", "--output-dir", str(out)]
    assert main(argv) == 0
    scores = json.loads((out / "test_results.json").read_text())
    # test = the copy's test split (newstest2017 on the Hub), scored with beam 2 and the length penalty
    assert scores["segments"] == 20 and scores["num_beams"] == 2 and scores["length_penalty"] == 0.6
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert scores["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6")
    assert json.loads((out / "generation_config.json").read_text())["length_penalty"] == 0.6
    # the data's own test split only: the embedded out-of-domain pairs need --gnome-test
    assert not (out / "gnome_results.json").exists()


def test_wmt17_dir_mistakes_are_one_line(tmp_path, capsys):
    assert main(["train", "agf", "--wmt17-dir", str(tmp_path), "--output-dir", str(tmp_path / "o")]) == 2
    assert "--wmt17-dir needs --dataset wmt17" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "o2"
    assert (
        main(["train", "agf", "--dataset", "wmt17", "--wmt17-dir", str(empty), "--tiny", "--output-dir", str(out)])
        == 2
    )
    err = capsys.readouterr().err
    assert "de-en" in err and "hf download wmt/wmt17" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
