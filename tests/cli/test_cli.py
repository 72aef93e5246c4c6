"""The command line as a user meets it: fast help, one-line errors with exit status 2, no half-made folders."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plldr_hf.cli import main
from tests.utils import CONFIG_ERRORS, REPO_ROOT, tiny_agf, tiny_model


def _run(*argv, timeout=300):
    return subprocess.run(
        [sys.executable, "-c", "import sys, plldr_hf_cli; sys.exit(plldr_hf_cli.main(sys.argv[1:]))", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )


def test_help_imports_neither_torch_nor_transformers():
    code = (
        "import sys, plldr_hf_cli\n"
        "parser = plldr_hf_cli.build_parser()\n"
        "parser.format_help()\n"
        "for name in ('torch', 'transformers', 'plldr_hf'):\n"
        "    assert name not in sys.modules, name\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("launch", [["-m"], ["-u", "-m"]], ids=["python -m", "python -u -m (torchrun)"])
def test_module_refuses_in_one_line(launch, tmp_path):
    """`python -m plldr_hf` (as torchrun and accelerate run it) refuses a bad option in one line, before any work."""
    proc = subprocess.run(
        [sys.executable, *launch, "plldr_hf", "train", "pldrllm", "--max-steps", "0", "--output-dir", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2 and not (tmp_path / "o").exists()
    assert proc.stderr.splitlines() == [
        "plldr-hf train pldrllm: error: --max-steps: must be a positive integer, got 0"
    ]


def test_the_example_script_and_the_package_import_say_nothing_of_the_optional_backends():
    """The example script imports the package before parsing: its refusal is still its one line, without the
    import lines of the optional backends that transformers imports (torchao, bitsandbytes, kernels)."""
    script = str(REPO_ROOT / "examples" / "train_pldr_llm.py")
    proc = subprocess.run([sys.executable, script, "--max-steps", "0"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "plldr-hf train pldrllm: error: --max-steps: must be a positive integer, got 0"
    ]


def test_python_m_runs_the_command_and_import_registers():
    """`python -m plldr_hf` runs the command line (its training runs: `tests/test_readme.py`); a plain
    `import plldr_hf` registers the families and gives their classes."""
    proc = subprocess.run([sys.executable, "-m", "plldr_hf", "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("plldr-hf ")
    code = "import plldr_hf, transformers\nprint(transformers.AutoConfig.for_model('pldrllm').model_type, plldr_hf.AgfConfig.model_type)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["pldrllm", "agf"], proc.stderr[-2000:]


def test_train_flags_come_from_the_options_dataclasses(capsys):
    """`train FAMILY --help` is transformers' HfArgumentParser over the options: every field a flag of its own name
    (and of its aliases, the earlier spellings), defaults shown."""
    import dataclasses

    from plldr_hf.training.options import PRESETS, TrainOptions, TranslationOptions
    from plldr_hf_cli.commands.train import options_of

    for command, options in (("pldrllm", TrainOptions), ("agf", TranslationOptions)):
        with pytest.raises(SystemExit) as exited:
            main(["train", command, "--help"])
        assert exited.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        for spec in dataclasses.fields(options):
            if spec.metadata.get("cli", True):
                for flag in ("--" + spec.name, *spec.metadata.get("aliases", [])):
                    assert flag in text, (command, flag)
        assert "--save_only_model" in text and "--push_to_hub" in text and "--recipe NAME_OR_FILE" in text
        assert (
            "none: the size's; 100 where it sets none" in text
            if command == "pldrllm"
            else "peak learning rate [default: 0.0005]" in text
        )
    # the size choices are the presets' names, and a preset's values sit under the flags given
    options = options_of("pldrllm", ["--tiny", "--max-steps", "7"])[0]
    assert (options.max_steps, options.max_train_documents, options.size) == (7, 2000, "tiny")
    assert options_of("pldrllm", ["--size", "mini"])[0].size in PRESETS["pldrllm"]
    with pytest.raises(
        ValueError,
        match=r"--size: must be one of tiny, critical, mini, small, 110m or a recipe file \(.json, .yaml, .yml\), got 'huge'",
    ):
        options_of("pldrllm", ["--size", "huge"])


# the same mistakes through the command line and the Python API: (family, flags, field values)
SAME_MISTAKES = [
    ("pldrllm", ["--max-steps", "0"], {"max_steps": 0}),
    ("pldrllm", ["--max-steps", "eight"], {"max_steps": "eight"}),
    ("pldrllm", ["--batch-size", "-1"], {"per_device_train_batch_size": -1}),
    ("pldrllm", ["--per_device_train_batch_size", "0"], {"per_device_train_batch_size": 0}),
    ("pldrllm", ["--data_seed", "many"], {"data_seed": "many"}),
    ("pldrllm", ["--adam_beta1", "nan"], {"adam_beta1": float("nan")}),
    ("pldrllm", ["--max_grad_norm", "0.5"], {"max_grad_norm": 0.5}),
    ("pldrllm", ["--label_smoothing_factor", "0.1"], {"label_smoothing_factor": 0.1}),
    ("pldrllm", ["--learning-rate", "-0.1"], {"learning_rate": -0.1}),
    ("pldrllm", ["--learning-rate", "nan"], {"learning_rate": float("nan")}),
    ("pldrllm", ["--warmup-steps", "1.5"], {"warmup_steps": 1.5}),
    ("pldrllm", ["--size", "huge"], {"size": "huge"}),
    ("pldrllm", ["--clip-by", "max"], {"clip_by": "max"}),
    ("pldrllm", ["--dag-weights", "0.1,0.1"], {"dag_weights": "0.1,0.1"}),
    ("pldrllm", ["--dag-weights", "-1"], {"dag_weights": "-1"}),
    ("pldrllm", ["--lora-r", "4"], {"lora_r": 4}),
    ("pldrllm", ["--init-from", "m", "--tokenizer", "t"], {"init_from": "m", "tokenizer": "t"}),
    ("agf", ["--label-smoothing", "1"], {"label_smoothing": 1.0}),
    ("agf", ["--epochs", "0"], {"num_train_epochs": 0.0}),
    ("agf", ["--position", "nope"], {"position_encoding": "nope"}),
    ("agf", ["--wmt17-dir", "d"], {"wmt17_dir": "d"}),
    ("agf", ["--set", "dropout=Infinity"], {"model_overrides": {"dropout": float("inf")}}),
    ("agf", ["--set", "vocab_size=10"], {"model_overrides": {"vocab_size": 10}}),
    ("agf", ["--set", "pcmv=true"], {"model_overrides": {"pcmv": True}}),
]


@pytest.mark.parametrize("family, flags, values", SAME_MISTAKES)
def test_the_python_api_and_the_command_line_refuse_alike(family, flags, values, capsys, tmp_path):
    from plldr_hf.training.options import TrainOptions, TranslationOptions

    options_class = TrainOptions if family == "pldrllm" else TranslationOptions
    with pytest.raises(ValueError) as refused:
        options_class(**values)
    assert main(["train", family, *flags, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"plldr-hf train {family}: error: {refused.value}"
    assert not (tmp_path / "out").exists()


def test_the_python_api_refuses_values_the_command_line_cannot_give():
    from plldr_hf.training import TrainOptions, train

    for values, message in (
        ({"max_steps": True}, "--max-steps: must be a positive integer, got True"),
        ({"disable_tqdm": 1}, "--no-progress: must be true or false, got 1"),
        ({"save_only_model": "yes"}, "--save-only-model: must be true or false, got 'yes'"),
        ({"dataset": [3]}, "--dataset: must be a list of names or paths"),
        ({"dag_weights": (0.1, True, 0.1)}, "--dag-weights: must be three non-negative numbers"),
        ({"seed": None}, "--seed: must be a non-negative integer, got None"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            TrainOptions(**values)
    # a string where a list is meant is one item, as on the command line
    assert TrainOptions(dataset="file.txt", report_to="none").dataset == ["file.txt"]
    assert TrainOptions(report_to="none").report_to == []
    options = TrainOptions()
    options.max_steps = 0  # assigned after construction: checked again when the run starts
    with pytest.raises(ValueError, match="--max-steps: must be a positive integer, got 0"):
        train(options)
    with pytest.raises(TypeError, match=r"train\(\) takes TrainOptions .* got dict"):
        train({"max_steps": 3})


@pytest.mark.parametrize("command", [["train", "pldrllm"], ["train", "agf"], ["evaluate"], ["collapse"], ["convert"]])
def test_help_texts_are_clean(command):
    proc = _run(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "%%" not in text and ") (default:" not in text, text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "pldrllm", "--max-steps", "-5"], "--max-steps: must be a positive integer, got -5"),
        (["train", "pldrllm", "--max-steps", "0"], "--max-steps: must be a positive integer, got 0"),
        (["train", "pldrllm", "--batch-size", "two"], "--batch-size: must be a positive integer, got 'two'"),
        (["train", "pldrllm", "--dataset", "no/such/file.txt"], "--dataset: no/such/file.txt does not exist"),
        (["train", "agf", "--dataset", "no/such/file.jsonl"], "--dataset: no/such/file.jsonl does not exist"),
        (["translate", "m", "--num-beams", "0", "text"], "--num-beams: must be a positive integer, got 0"),
        (["translate", "m", "--num-beams", "-2", "text"], "--num-beams: must be a positive integer, got -2"),
        (["evaluate", "m", "--block-size", "0"], "--block-size: must be a positive integer, got 0"),
        (["evaluate", "m", "--batch-size", "-3"], "--batch-size: must be a positive integer, got -3"),
        (["evaluate", "m", "--batch-size", "0"], "--batch-size: must be a positive integer, got 0"),
        (["collapse", "m", "out", "--tolerance", "-1"], "--tolerance: must be a finite non-negative number, got -1"),
        (["collapse", "m", "out", "--tolerance", "nan"], "--tolerance: must be a finite non-negative number, got nan"),
        (["collapse", "no/such/model", "out"], "no/such/model"),
        (["diagnose", "no/such/model"], "no/such/model"),
    ],
)
def test_mistakes_are_one_line_with_status_2_and_leave_nothing(tmp_path, argv, message):
    out = tmp_path / "out"
    argv = [*argv, "--output-dir", str(out)] if argv[0] == "train" else argv
    proc = _run(*argv)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) <= 2, proc.stderr  # argparse: usage line + error line
    assert not out.exists()


def test_collapse_refusal_speaks_in_flags(tmp_path, capsys):
    folder = tmp_path / "model"
    tiny_model().save_pretrained(folder)
    assert main(["collapse", str(folder), str(tmp_path / "collapsed")]) == 1
    err = capsys.readouterr().err
    assert "--force" in err and "force=True" not in err
    assert not (tmp_path / "collapsed").exists()


def test_wrong_model_type_is_named(tmp_path, capsys):
    folder = tmp_path / "agf"
    tiny_agf().save_pretrained(folder)
    capsys.readouterr()
    assert main(["collapse", str(folder), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "'agf' model" in err and "PLDR-LLM" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("family", ["pldrllm", "agf"])
def test_bad_model_inputs_name_the_argument_and_the_range(family):
    import torch

    if family == "pldrllm":
        model = tiny_model()

        def call(ids, mask=None):
            return model(ids, attention_mask=mask, use_cache=False)
    else:
        model = tiny_agf()

        def call(ids, mask=None):
            return model(ids, attention_mask=mask, decoder_input_ids=torch.tensor([[1, 5]]), use_cache=False)

    with pytest.raises(ValueError, match=r"token id 99 .* outside the vocabulary \[0, 99\)"):
        call(torch.tensor([[5, 99, 7]]))
    with pytest.raises(ValueError, match="empty input of shape"):
        call(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`attention_mask` of shape \(1, 4\), expected \(1, 3\)"):
        call(torch.tensor([[5, 6, 7]]), torch.ones(1, 4, dtype=torch.long))


@pytest.mark.parametrize(
    "family, field, value",
    [
        ("pldrllm", "layer_norm_eps", -1.0),
        ("pldrllm", "eos_token_id", 500),
        ("pldrllm", "attention_dropout", 1.5),
        ("agf", "dropout", -0.1),
        ("agf", "pad_token_id", 500),
        ("agf", "agf_min_radius", 0.0),
    ],
)
def test_invalid_config_values_are_refused(family, field, value):
    from plldr_hf import AgfConfig, PldrllmConfig

    cls = PldrllmConfig if family == "pldrllm" else AgfConfig
    with pytest.raises(CONFIG_ERRORS, match="(?s)" + f"{field}.*{value!r}".replace("(", r"\(").replace(")", r"\)")):
        cls(vocab_size=99, **{field: value}) if family == "agf" else cls(vocab_size=99, **{field: value})


@pytest.mark.parametrize(
    "argv",
    [
        ["collapse", "{model}", "{file}"],
        ["diagnose", "{model}", "--output-dir", "{file}"],
        ["lm-eval-task", "{file}"],
        ["quickstart", "--output-dir", "{file}"],
        ["train", "pldrllm", "--tiny", "--output-dir", "{file}"],
        ["train", "agf", "--tiny", "--output-dir", "{file}"],
        ["push", "{model}", "org/repo", "--dry-run", "{file}"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_an_output_path_that_is_a_file_is_refused_before_any_work(tmp_path, capsys, argv):
    model = tmp_path / "model"
    tiny_model().save_pretrained(model)
    target = tmp_path / "taken.txt"
    target.write_text("keep me")
    capsys.readouterr()  # the save's progress bar
    assert main([part.format(model=model, file=target) for part in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a file, not a folder" in err and len(err.splitlines()) == 1, err
    assert target.read_text() == "keep me"


def test_quickstart_minutes_must_be_positive():
    proc = _run("quickstart", "--minutes", "-1")
    assert proc.returncode == 2 and "--minutes: must be a finite positive number, got -1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ctrl_c_during_training_is_one_line_saying_how_to_resume(monkeypatch, capsys, tmp_path):
    from plldr_hf_cli.commands import train

    def interrupted(options, summary):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "train_and_report", interrupted)
    # before the first checkpoint, --resume would find nothing: the line says so and how to start again
    assert main(["train", "pldrllm", "--tiny", "--output-dir", str(tmp_path / "run")]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("plldr-hf train pldrllm: interrupted; no checkpoint was saved yet") and "--overwrite" in err
    assert "\n" not in err

    def interrupted_after_a_checkpoint(options, summary):
        (Path(options.output_dir) / "checkpoint-5").mkdir(parents=True)
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "train_and_report", interrupted_after_a_checkpoint)
    assert main(["train", "pldrllm", "--tiny", "--output-dir", str(tmp_path / "run2")]) == 130
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "plldr-hf train pldrllm: interrupted; continue from the last checkpoint with the same command and --resume"
    )


def test_threads_wait_passively_on_a_busy_machine_only(monkeypatch):
    from plldr_hf_cli import wait_threads_passively_when_busy

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    assert not wait_threads_passively_when_busy(2) and "OMP_WAIT_POLICY" not in os.environ
    monkeypatch.setattr(os, "getloadavg", lambda: (6.5, 6.0, 5.0))
    assert wait_threads_passively_when_busy(2) and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's choice is kept
    assert not wait_threads_passively_when_busy(2) and os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
