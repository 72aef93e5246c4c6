"""Probe the command line and the model API with bad inputs and faults, and count how each one ends.

    python tools/probe_bad_inputs.py [--out DIR] [--verbose]

Every case is one mistake a user makes (a wrong value, a damaged file, a folder pointed at by mistake, a wrong
tensor shape). Each ends in one of four ways:

- **clear**: the command exits non-zero with one line `plldr-hf COMMAND: error: ...` on stderr and no traceback,
  or the API raises an exception whose message names the problem;
- **silent**: it succeeded (exit 0, a return value) although the input was wrong;
- **traceback / unclear**: it failed, but with a traceback or a message that does not name the problem;
- **data loss**: a folder that existed before the case changed.

Prints a Markdown table of the counts and writes `probe.json` and `probe.md` into `--out` (default: a temporary
folder). Exit status 1 when any case is not clear. Runs offline in about a minute on a CPU; `tests/test_probe.py`
runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import inspect
import io
import json
import math
import os
import pickle
import shutil
import sys
import tempfile
import traceback
import types
from dataclasses import asdict, dataclass
from pathlib import Path


REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


@dataclass
class Outcome:
    case: str
    kind: str  # cli / api
    verdict: str  # clear / silent / traceback / data loss
    detail: str


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(folder)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _cli(argv: list[str], expect: str) -> tuple[str, str]:
    """(verdict, detail) of `plldr-hf ARGV`, expected to fail with a line containing `expect`."""
    from plldr_hf.cli import main

    err = io.StringIO()
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    except Exception:
        return "traceback", traceback.format_exc(limit=1).strip().splitlines()[-1]
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    if status in (0, None):
        return "silent", f"exit 0: {out.getvalue().strip()[:120]}"
    last = lines[-1] if lines else ""
    if "Traceback" in err.getvalue() or not last.startswith("plldr-hf") or ": error:" not in last:
        return "traceback", last[:200]
    if expect.lower() not in last.lower():
        return "unclear", last[:200]
    return "clear", last[:200]


def _api(call, expect: str) -> tuple[str, str]:
    try:
        call()
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
        if expect.lower() in message.lower():
            return "clear", message[:200]
        return "unclear", message[:200]
    return "silent", "no exception"


class Probe:
    def __init__(self, work: Path):
        self.work = work
        self.outcomes: list[Outcome] = []
        self._build_folders()

    # ---------------------------------------------------------------- fixtures made by the probe itself
    def _build_folders(self) -> None:
        from tests.hub_utils import tiny_agf
        from tests.utils import tiny_model, tiny_pldrllm_tokenizer, tiny_translation_tokenizer

        self.pldr = self.work / "pldr"
        tokenizer = tiny_pldrllm_tokenizer()
        tiny_model(vocab_size=len(tokenizer)).save_pretrained(self.pldr)
        tokenizer.save_pretrained(self.pldr)
        self.agf = self.work / "agf"
        tokenizer = tiny_translation_tokenizer()
        tiny_agf(len(tokenizer)).save_pretrained(self.agf)
        tokenizer.save_pretrained(self.agf)
        self.texts = self.work / "texts.txt"
        self.texts.write_text("to be or not to be\n")

    def copy(self, source: Path, name: str) -> Path:
        target = self.work / name
        shutil.copytree(source, target)
        return target

    def record(self, case: str, kind: str, verdict: str, detail: str) -> None:
        self.outcomes.append(Outcome(case, kind, verdict, detail))

    def cli(self, case: str, argv: list[str], expect: str, guard: Path | None = None) -> None:
        before = _digest(guard) if guard is not None else None
        verdict, detail = _cli([str(a) for a in argv], expect)
        if guard is not None and _digest(guard) != before:
            verdict, detail = "data loss", f"{guard.name} changed; {detail}"
        self.record(case, "cli", verdict, detail)

    def api(self, case: str, call, expect: str) -> None:
        self.record(case, "api", *_api(call, expect))

    # ---------------------------------------------------------------- the cases
    def run(self) -> list[Outcome]:
        self.cli_every_numeric_flag()
        self.cli_trainer_fields()
        self.cli_every_output_path()
        self.cli_values()
        self.cli_folders()
        self.cli_damaged()
        self.cli_every_input_path()
        self.cli_family_flags()
        self.cli_damaged_weights()
        self.cli_config_values()
        self.cli_text_files()
        self.cli_file_size_limit()
        self.cli_mounted_faults()
        self.cli_concurrent_twins()
        self.api_models()
        self.api_configs()
        self.api_files()
        self.api_run_options()
        self.api_run_reports()
        self.api_server_requests()
        self.api_data_formats()
        self.api_resume_over_changed_data()
        return self.outcomes

    # ---------------------------------------------------------------- the surfaces added with training runs and
    # serving. The rule: a new flag, options or report field, request field or data format is covered here, by
    # generation from its definition where there is one, in the change that adds it.
    def api_run_options(self) -> None:
        """Every field of both run-options classes (transformers' own fields included: the options are
        `TrainingArguments` subclasses), through the Python API: a value of the wrong type for the field's
        annotation, a boolean where a number is meant, NaN and -1 for numbers, 0 where the field needs at least 1,
        and a value outside its choices."""
        import typing

        from plldr_hf.training.options import TrainOptions, TranslationOptions, flag_of

        for options in (TrainOptions, TranslationOptions):
            hints = typing.get_type_hints(options)
            for spec in dataclasses.fields(options):
                if not spec.init:
                    continue
                hint = hints[spec.name]
                arms = (
                    set(typing.get_args(hint))
                    if typing.get_origin(hint) in (typing.Union, types.UnionType)
                    else {hint}
                )
                arms.discard(type(None))
                values = [object()] if arms != {str} else [3]
                if arms & {int, float}:
                    signed = spec.metadata.get("min") is None or spec.metadata.get("unset") == -1
                    values += [True, float("nan"), [1]] + ([] if signed else [-1])
                    low = spec.metadata.get("min")
                    if low in (0, 1) and not (int in arms and low == 0):
                        values.append(0)
                if arms == {bool}:
                    values += ["false", 1]
                if spec.metadata.get("choices"):
                    values.append("no-such-choice")
                for value in values:
                    self.api(
                        f"{options.__name__}({spec.name}={value!r})",
                        lambda options=options, spec=spec, value=value: options(**{spec.name: value}),
                        flag_of(spec),
                    )
        self.api("train(dict)", lambda: __import__("plldr_hf.training", fromlist=["train"]).train({"max_steps": 3}),
                 "TrainOptions")  # fmt: skip

    def api_run_reports(self) -> None:
        """`RunReport.load` of a missing, empty, truncated, foreign and too deeply nested report: the file is named."""
        from plldr_hf.training import RunReport

        for name, content in (("missing", None), ("empty", ""), ("truncated", '{"family": "pl'), ("list", "[1]"),
                              ("foreign", '{"a": 1}'), ("nested", "[" * 100_000)):  # fmt: skip
            folder = self.work / f"report-{name}"
            folder.mkdir()
            if content is not None:
                (folder / "train_report.json").write_text(content)
            self.api(f"RunReport.load {name}", lambda folder=folder: RunReport.load(folder), "train_report.json")

    def api_server_requests(self) -> None:
        """Every request field `plldr-hf serve` checks, with the bad values of the load test
        (`benchmarks/serve_load.py`): each must be refused with its field named."""
        from benchmarks.serve_load import bad_requests
        from plldr_hf_cli.serve_checks import ModelLimits, check_request

        limits = ModelLimits(str(self.pldr))
        positions = json.loads((self.pldr / "config.json").read_text())["max_position_embeddings"]
        for route, body, field in bad_requests(str(self.pldr), positions):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()

            def call(route=route, data=data):
                checked = check_request(route, data, limits)
                if isinstance(checked, tuple):
                    raise ValueError(f"HTTP {checked[0]} param={checked[1]}: {checked[2]}")

            self.api(f"serve {route} bad {field}", call, f"param={field}")

    def api_data_formats(self) -> None:
        """Every data format the corpus readers take, truncated, of the wrong type and empty, read as a run reads it:
        the error names the file."""
        import gzip

        from plldr_hf.training import TrainOptions, train

        folder = self.work / "formats"
        folder.mkdir()
        cases = {
            # compressed text cut short (random words, so the compressed file is long enough to cut)
            "truncated.txt.gz": gzip.compress(
                "\n\n".join(
                    " ".join(f"w{(i * 7919 + j * 104729) % 9973}" for j in range(40)) for i in range(400)
                ).encode()
            )[:2000],
            "too-small.txt": b"to be or not to be\n",
            "numbers.jsonl": b'{"text": 5}\n{"text": 6}\n',
            "broken.jsonl": b'{"text": "to be"\n',
            "empty.txt": b"",
            "empty.parquet": b"",
            "truncated.parquet": b"PAR1\x00\x00",
            "bad.csv": b'text\n"unclosed\n',
        }
        for name, content in cases.items():
            path = folder / name
            path.write_bytes(content)
            for streaming in (False, True):
                options = TrainOptions.from_name(
                    "tiny", output_dir=str(self.work / f"run-{name}-{streaming}"), dataset=[str(path)],
                    streaming=streaming, max_steps=1, report_to=["none"], disable_tqdm=True,
                )  # fmt: skip
                self.api(f"train on {name} streaming={streaming}", lambda o=options: train(o), name)

    def api_resume_over_changed_data(self) -> None:
        """A run's data fingerprint against files added, removed and rewritten, and other data settings."""
        from plldr_hf.training import TrainOptions
        from plldr_hf.training.start import check_data_unchanged

        folder = self.work / "fingerprinted"
        folder.mkdir()
        (folder / "a.txt").write_text("to be\n")
        (folder / "b.txt").write_text("or not\n")
        out = self.work / "fingerprint-run"
        out.mkdir()
        options = TrainOptions(dataset=[str(folder)], output_dir=str(out))
        check_data_unchanged(out, options, resuming=False)
        for name, change, undo, expect in (
            ("added", lambda: (folder / "c.txt").write_text("new\n"), lambda: (folder / "c.txt").unlink(), "c.txt added"),
            ("removed", lambda: (folder / "b.txt").rename(self.work / "b.txt"),
             lambda: (self.work / "b.txt").rename(folder / "b.txt"), "b.txt removed"),
            ("rewritten", lambda: (folder / "a.txt").write_text("to be, longer\n"),
             lambda: None, "a.txt rewritten"),
        ):  # fmt: skip
            change()
            self.api(f"resume over data {name}", lambda: check_data_unchanged(out, options, resuming=True), expect)
            undo()
        streamed = dataclasses.replace(options, streaming=True)
        self.api("resume streamed over in-memory data", lambda: check_data_unchanged(out, streamed, resuming=True),
                 "streaming")  # fmt: skip

    def cli_every_numeric_flag(self) -> None:
        """The class, not the cases: every numeric flag of every command, read off the parser itself (a flag added
        later is probed too), gets NaN, an infinity, -1 (unless negative values mean something: `SIGNED_FLAGS`) and
        0 where its type needs at least 1."""
        from plldr_hf.cli import build_parser
        from plldr_hf.training.options import flag_of

        for path, action in numeric_flags(build_parser()):
            flag = max(action.option_strings, key=len)
            values = ["nan", "inf"]
            own = _option_spec(path, action.dest)
            means_unset = own is not None and own.metadata.get("unset") == -1  # transformers' "not set"
            if (
                flag not in SIGNED_FLAGS
                and not means_unset
                and (path[0] != "train" or (own and "min" in own.metadata))
            ):
                # no count, size, rate or tolerance is negative (transformers' own fields: their ranges are theirs)
                values.append("-1")
            if _refuses(action.type, "0") or _option_needs_positive(path, action.dest):
                values.append("0")  # the flags that need at least 1 say so through the full command line too
            # a `train` flag is named as the options name it (its first alias, else its dashed spelling)
            expect = flag_of(own) if own else flag
            for value in values:
                self.cli(f"{' '.join(path)} {flag} {value}", [*path, flag, value], expect)
        argv = ["train", "agf", "--tiny", "--set", "dropout=Infinity", "--output-dir", self.work / "nf"]
        self.cli("train agf --set non-finite", argv, "--set")
        # the removed `--trainer-arg` names its replacement
        for path in (["train", "agf"], ["train", "pldrllm"]):
            argv = [*path, "--tiny", "--trainer-arg", "save_only_model=true", "--output-dir", self.work / "removed"]
            self.cli(f"{' '.join(path)} --trainer-arg (removed)", argv, "--trainer-arg")

    def cli_trainer_fields(self) -> None:
        """A field that no flag knows; a recipe file that cannot be read. (transformers' own fields are flags of the
        options' parser, probed with every other numeric flag: `numeric_flags`.)"""
        for family in ("pldrllm", "agf"):
            argv = ["train", family, "--tiny", "--no_such_field", "1", "--output-dir", self.work / "tf"]
            self.cli(f"train {family} --no_such_field", argv, "--no_such_field")
        for name, content in (("broken", "{"), ("list", "[1]"), ("extends-nothing", '{"extends": "huge"}'),
                              ("nested", "[" * 100_000)):  # fmt: skip
            path = self.work / f"recipe-{name}.json"
            path.write_text(content)
            argv = ["train", "pldrllm", "--recipe", path, "--output-dir", self.work / "tf"]
            self.cli(f"train --recipe {name} file", argv, "--recipe")
        self.cli("train --recipe missing file", ["train", "agf", "--recipe", self.work / "none.yaml"], "--recipe")

    def cli_every_output_path(self) -> None:
        """The class: every argument a command writes gets the paths that would lose what it reads (the input
        itself, a file inside it, the folder holding it) and the paths it cannot write to (a folder for a file, a
        file where a folder should be). The model folder must not change."""
        p, a, w = self.pldr, self.agf, self.work
        holder = w / "holder"
        held = self.copy(p, "holder/pldr")  # a model inside a folder passed as the output
        templates = [
            ("evaluate --output-json", lambda out, m: ["evaluate", m, "--output-json", out], "file", p),
            (
                "evaluate --hypotheses",
                lambda out, m: ["evaluate", m, "--hypotheses", out, "--max-samples", "2"],
                "file",
                a,
            ),
            ("plot-agf --output", lambda out, m: ["plot-agf", m, "--output", out], "file", a),
            ("diagnose --output-dir", lambda out, m: ["diagnose", m, "--output-dir", out, "--overwrite"], "folder", p),
            ("collapse OUT_DIR", lambda out, m: ["collapse", m, out, "--force", "--overwrite"], "folder", p),
            ("push --dry-run", lambda out, m: ["push", m, "user/model", "--dry-run", out, "--overwrite"], "folder", p),
        ]
        for name, argv, kind, model in templates:
            inside = model / "config.json"
            target = held if model is p else model
            cases = [("the input itself", model, "input", model), ("a file inside the input", inside, "input", model)]
            if kind == "folder" or model is p:
                cases.append(("the folder holding the input", holder, "input", held))
            if kind == "file":
                cases += [
                    ("a folder", w, "folder", model),
                    ("under a file", self.texts / "x.out", "not a folder", model),
                ]
            for what, out, expect, used in cases:
                self.cli(f"{name} = {what}", argv(out, used if what != "the folder holding the input" else target),
                         expect, guard=used)  # fmt: skip

    def cli_values(self) -> None:
        p, a, w = self.pldr, self.agf, self.work
        for flag, value in [
            ("--block-size", "0"),
            ("--batch-size", "0"),
            ("--batch-size", "-3"),
            ("--max-blocks", "0"),
        ]:
            self.cli(f"evaluate {flag} {value}", ["evaluate", p, flag, value], flag)
        for value in ("0", "-2", "x"):
            self.cli(f"translate --num-beams {value}", ["translate", a, "a text", "--num-beams", value], "--num-beams")
        for value in ("-1", "nan", "inf"):
            self.cli(f"collapse --tolerance {value}", ["collapse", p, w / "c", "--tolerance", value], "--tolerance")
        self.cli("quickstart --minutes -1", ["quickstart", "--minutes", "-1", "--output-dir", w / "q"], "--minutes")
        self.cli("diagnose --new-tokens 0", ["diagnose", p, "--new-tokens", "0"], "--new-tokens")
        self.cli("train --max-steps 0", ["train", "pldrllm", "--tiny", "--max-steps", "0"], "--max-steps")
        self.cli("train --dag-weights a,b", ["train", "pldrllm", "--dag-weights", "a,b"], "--dag-weights")
        self.cli(
            "train agf --set unknown field",
            ["train", "agf", "--tiny", "--set", "no_such_field=3", "--output-dir", w / "t1"],
            "no_such_field",
        )
        self.cli(
            "train --tokenizer missing",
            ["train", "pldrllm", "--tiny", "--tokenizer", "/nonexistent/tok", "--output-dir", w / "t2"],
            "tokenizer",
        )
        broken = w / "broken.jsonl"
        broken.write_text('{"text": "fine"}\n{"text": unquoted\n')
        self.cli(
            "train --dataset malformed",
            ["train", "pldrllm", "--tiny", "--dataset", broken, "--output-dir", w / "t3"],
            "broken.jsonl",
        )
        self.cli(
            "train --block-size beyond the data",
            ["train", "pldrllm", "--tiny", "--block-size", "1000000", "--output-dir", w / "t4", "--report-to", "none"],
            "block",
        )
        self.cli(
            "train with fewer blocks than one batch",
            [
                "train",
                "pldrllm",
                "--tiny",
                "--block-size",
                "3000",
                "--max-train-documents",
                "300",
                "--output-dir",
                w / "t5",
                "--report-to",
                "none",
            ],
            "fewer than one batch",
        )
        self.cli("train --dataset missing path", ["train", "pldrllm", "--dataset", "./nope.txt"], "nope.txt")
        self.cli("evaluate --texts missing", ["evaluate", p, "--texts", w / "nope.txt"], "nope.txt")
        for name in ("t1", "t2", "t3", "t4", "t5"):
            if (w / name).exists():
                self.record(f"half-made folder {name}", "cli", "data loss", f"{name} left behind by a failed run")

    def cli_folders(self) -> None:
        p, w = self.pldr, self.work
        other = self.copy(self.agf, "someone_elses")
        self.cli("collapse into a non-empty folder", ["collapse", p, other, "--force"], "not empty", guard=other)
        self.cli("diagnose into a non-empty folder", ["diagnose", p, "--output-dir", other], "not empty", guard=other)
        self.cli("lm-eval-task into a non-empty folder", ["lm-eval-task", other], "not empty", guard=other)
        self.cli(
            "push --dry-run into a non-empty folder",
            ["push", p, "org/x", "--dry-run", other],
            "not empty",
            guard=other,
        )
        self.cli(
            "train into a non-empty folder",
            ["train", "pldrllm", "--tiny", "--output-dir", other],
            "--resume",
            guard=other,
        )
        self.cli("quickstart into a non-empty folder", ["quickstart", "--output-dir", other], "not empty", guard=other)
        afile = w / "a_file"
        afile.write_text("keep me\n")
        self.cli("collapse into a file", ["collapse", p, afile, "--force"], "is a file", guard=w / "pldr")
        self.cli("diagnose into a file", ["diagnose", p, "--output-dir", afile], "is a file")
        self.cli("collapse OUT = MODEL", ["collapse", p, p, "--force"], "also the input", guard=p)
        if afile.read_text() != "keep me\n":
            self.record("file output kept", "cli", "data loss", "a_file changed")

    def cli_damaged(self) -> None:
        p, a, w = self.pldr, self.agf, self.work
        self.cli("evaluate a missing relative folder", ["evaluate", "no_such_model_dir/x/y"], "no_such_model_dir")
        self.cli("evaluate ./missing", ["evaluate", "./missing_model"], "does not exist")
        self.cli("diagnose a Hub id offline", ["diagnose", "no-such-org/no-such-model"], "no-such-org/no-such-model")
        self.cli("translate a bare missing name", ["translate", "missing_model", "a text"], "missing_model")
        self.cli("evaluate a folder without config", ["evaluate", w], "config.json")
        no_weights = self.copy(p, "no_weights")
        (no_weights / "model.safetensors").unlink()
        self.cli("evaluate a folder without weights", ["evaluate", no_weights], "weights")
        truncated = self.copy(p, "truncated")
        data = (truncated / "model.safetensors").read_bytes()
        (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
        self.cli("evaluate truncated weights", ["evaluate", truncated], "model.safetensors")
        self.cli("diagnose truncated weights", ["diagnose", truncated, "--output-dir", w / "d"], "model.safetensors")
        bad_json = self.copy(p, "bad_json")
        (bad_json / "config.json").write_text("{not json")
        self.cli("evaluate malformed config.json", ["evaluate", bad_json], "config.json")
        bad_value = self.copy(p, "bad_value")
        config = json.loads((bad_value / "config.json").read_text())
        config["rope_theta"] = "abc"
        (bad_value / "config.json").write_text(json.dumps(config))
        self.cli("evaluate config rope_theta='abc'", ["evaluate", bad_value], "rope_theta")
        no_tok = self.copy(a, "agf_no_tokenizer")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (no_tok / name).unlink(missing_ok=True)
        self.cli("translate without a tokenizer", ["translate", no_tok, "a text"], "tokenizer")
        self.cli("evaluate agf without a tokenizer", ["evaluate", no_tok, "--max-samples", "2"], "tokenizer")
        self.cli("collapse an AGF folder", ["collapse", a, w / "c2", "--force"], "agf")
        self.cli("translate a PLDR-LLM folder", ["translate", p, "a text"], "pldrllm")
        n = "--max-position-embeddings"
        self.cli("convert a missing .pth", ["convert", w / "none.pth", w / "conv", n, "32"], "none.pth")
        fake = w / "fake.pth"
        fake.write_bytes(b"not a checkpoint")
        self.cli("convert a non-checkpoint", ["convert", fake, w / "conv", n, "32"], "fake.pth")
        self.cli("convert without the context length", ["convert", fake, w / "conv"], "--max-position-embeddings")
        legacy = REPO_ROOT / "tests" / "fixtures" / "pldrllm_legacy_pth"
        released = REPO_ROOT / "tests" / "fixtures" / "pldrllm_released" / "tokenizer.model"
        self.cli(
            "convert with another model's tokenizer",
            ["convert", legacy / "tiny_v510.pth", w / "conv", n, "32", "--tokenizer", released],
            "32,000 pieces",
        )
        self.cli("plot-agf a PLDR-LLM folder", ["plot-agf", p], "pldrllm")

    def cli_every_input_path(self) -> None:
        """The class: every argument a command reads from gets a missing path, a folder where a file belongs and a
        file where a folder belongs; the message names the path."""
        w = self.work
        missing, folder, afile = w / "no_such_input", w / "an_input_folder", w / "an_input_file.txt"
        folder.mkdir(exist_ok=True)
        afile.write_text("some text\n")
        legacy = REPO_ROOT / "tests" / "fixtures" / "pldrllm_legacy_pth"
        n = "--max-position-embeddings"
        # (command, argv with {} where the path goes, what the path should be: "folder" or "file")
        templates = [
            ("evaluate MODEL_DIR", ["evaluate", "{}"], "folder"),
            ("diagnose MODEL_DIR", ["diagnose", "{}", "--output-dir", w / "pi_d"], "folder"),
            ("collapse MODEL_DIR", ["collapse", "{}", w / "pi_c", "--force"], "folder"),
            ("translate MODEL_DIR", ["translate", "{}", "a text"], "folder"),
            ("plot-agf MODEL_DIR", ["plot-agf", "{}", "--output", w / "pi.png"], "folder"),
            ("push MODEL_DIR", ["push", "{}", "user/model", "--dry-run", w / "pi_p"], "folder"),
            ("diagnose --texts", ["diagnose", self.pldr, "--texts", "{}", "--output-dir", w / "pi_d"], "file"),
            ("collapse --texts", ["collapse", self.pldr, w / "pi_c", "--texts", "{}"], "file"),
            ("evaluate --dataset", ["evaluate", self.pldr, "--dataset", "{}"], "file"),
            (
                "diagnose --tokenizer",
                ["diagnose", self.pldr, "--texts", self.texts, "--tokenizer", "{}", "--output-dir", w / "pi_d"],
                "folder",
            ),  # fmt: skip
            ("convert PTH", ["convert", "{}", w / "pi_v", n, "32"], "file"),
            (
                "convert --tokenizer",
                ["convert", legacy / "tiny_v510.pth", w / "pi_v", n, "32", "--tokenizer", "{}"],
                "file",
            ),  # fmt: skip
            (
                "train --tokenizer",
                ["train", "pldrllm", "--tiny", "--tokenizer", "{}", "--output-dir", w / "pi_t"],
                "folder",
            ),  # fmt: skip
        ]
        for name, template, kind in templates:
            wrong = afile if kind == "folder" else folder
            for label, path in (("missing", missing), (f"a {'file' if kind == 'folder' else 'folder'}", wrong)):
                argv = [path if part == "{}" else part for part in template]
                self.cli(f"{name} = {label}", argv, path.name)
        for name in ("pi_d", "pi_c", "pi_p", "pi_v", "pi_t"):
            if (w / name).exists():
                self.record(f"half-made folder {name}", "cli", "data loss", f"{name} left behind by a failed run")

    def cli_family_flags(self) -> None:
        """The class: every evaluate flag of one family, read off the parser, given for a model of the other family;
        and a tokenizer of the other family handed to a command."""
        from plldr_hf.cli import build_parser

        parser = build_parser()
        evaluate = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["evaluate"]
        owners = evaluate.get_default("family_flags")
        for dest, (model_types, flag) in owners.items():
            action = next(a for a in evaluate._actions if a.dest == dest)
            value = [] if action.nargs == 0 else ["4"] if action.type is not None else ["x"]
            model = self.agf if "pldrllm" in model_types else self.pldr
            self.cli(f"evaluate {flag} on the other family", ["evaluate", model, flag, *value], "applies to")
        self.cli(
            "diagnose --tokenizer of an AGF model",
            ["diagnose", self.pldr, "--texts", self.texts, "--tokenizer", self.agf, "--output-dir", self.work / "d3"],
            "belongs to",
        )
        self.cli(
            "collapse --tokenizer of an AGF model",
            ["collapse", self.pldr, self.work / "c3", "--texts", self.texts, "--tokenizer", self.agf, "--force"],
            "belongs to",
        )

    def _variant(self, source: Path, name: str, tensors=None, config=None) -> Path:
        """A copy of a model folder with its tensors (a dict → dict function) or config (a dict update) changed."""
        from safetensors.torch import load_file, save_file

        folder = self.copy(source, name)
        if tensors is not None:
            weights = folder / "model.safetensors"
            save_file(tensors(load_file(weights)), weights, metadata={"format": "pt"})
        if config is not None:
            data = json.loads((folder / "config.json").read_text())
            data.update(config)
            (folder / "config.json").write_text(json.dumps(data))
        return folder

    def cli_damaged_weights(self) -> None:
        """The class: weights that load but cannot be right (integer-coded, one integer tensor, NaN, inf), through
        every command that loads a model; checkpoints that are not the run's."""
        import torch

        def all_int8(sd):
            return {k: (v * 10).to(torch.int8) for k, v in sd.items()}

        def one_int8(sd):
            key = sorted(sd)[0]
            return {**sd, key: sd[key].to(torch.int8)}

        def one_nan(sd):
            key = sorted(sd)[-1]
            return {**sd, key: sd[key].clone().fill_(float("nan"))}

        def all_inf(sd):
            return {k: v.clone().fill_(float("inf")) for k, v in sd.items()}

        w = self.work
        for label, damage, expect in (
            ("int8", all_int8, "stored as integers"),
            ("one int8 tensor", one_int8, "stored as integers"),
            ("a NaN tensor", one_nan, "NaN or infinite"),
            ("inf everywhere", all_inf, "NaN or infinite"),
        ):
            slug = label.replace(" ", "_")
            pldr = self._variant(self.pldr, f"pldr_{slug}", tensors=damage)
            agf = self._variant(self.agf, f"agf_{slug}", tensors=damage)
            for argv in (
                ["evaluate", pldr, "--max-blocks", "2"],
                ["diagnose", pldr, "--output-dir", w / f"dw_{slug}"],
                ["collapse", pldr, w / f"cw_{slug}", "--force"],
                ["evaluate", agf, "--max-samples", "2"],
                ["translate", agf, "a text"],
                ["plot-agf", agf, "--output", w / f"pw_{slug}.png"],
            ):
                self.cli(f"{argv[0]} with {label} weights ({argv[1].name.split('_')[0]})", argv, expect)
        for family, other in (("pldrllm", "agf"), ("agf", "pldrllm")):
            run = w / f"run_{family}"
            argv = ["train", family, "--tiny", "--max-steps", "2", "--save-steps", "2", "--output-dir", run]
            if _cli([str(a) for a in [*argv, "--report-to", "none"]], "")[0] != "silent":
                self.record(f"train {family} for the resume cases", "cli", "traceback", "the tiny run failed")
                continue
            checkpoint = run / "checkpoint-2"
            foreign = (self.agf if family == "pldrllm" else self.pldr) / "model.safetensors"
            weights = (checkpoint / "model.safetensors").read_bytes()
            (checkpoint / "model.safetensors").write_bytes(foreign.read_bytes())
            resume = [*argv[:4], "4", *argv[5:], "--report-to", "none", "--resume", checkpoint]
            self.cli(f"train {family} --resume a checkpoint holding {other} weights", resume, "not this model")
            (checkpoint / "model.safetensors").write_bytes(weights)
            state = json.loads((checkpoint / "trainer_state.json").read_text())
            (checkpoint / "trainer_state.json").write_text(json.dumps({**state, "global_step": -5}))
            self.cli(f"train {family} --resume global_step = -5", resume, "global_step")

    def cli_config_values(self) -> None:
        """The class: config.json values of the wrong type, and sizes that cannot be built, through `evaluate`."""
        cases = [
            ("pldr", {"vocab_size": "512"}, "vocab_size"),
            ("pldr", {"dtype": "bogus"}, "dtype"),
            ("agf", {"dtype": "int8"}, "dtype"),
            ("agf", {"is_encoder_decoder": False}, "is_encoder_decoder"),
            ("agf", {"d_model": "32"}, "d_model"),
            ("pldr", {"vocab_size": 40_000_000}, "do not match"),
            ("pldr", {"intermediate_size": 10**10}, "parameters"),
            ("pldr", {"A_dff": 2 * 10**9}, "parameters"),
            ("pldr", {"num_hidden_layers": 200_000}, "parameters"),
            ("pldr", {"num_reslayerA": 10**6}, "parameters"),
            ("agf", {"d_model": 10**6}, "parameters"),
            ("agf", {"encoder_layers": 10**6}, "parameters"),
        ]
        for number, (family, change, expect) in enumerate(cases):
            source = self.pldr if family == "pldr" else self.agf
            folder = self._variant(source, f"config_{number}", config=change)
            extra = ["--max-blocks", "2"] if family == "pldr" else ["--max-samples", "2"]
            self.cli(f"evaluate {family} config {change}", ["evaluate", folder, *extra], expect)

    def cli_text_files(self) -> None:
        """The class: text that is not UTF-8, empty, blank or a damaged .gz, in every argument that reads text."""
        import io

        w = self.work
        files = {
            "Latin-1": ("latin1.txt", b"caf\xe9 au lait\n", "UTF-8"),
            "empty": ("empty.txt", b"", "no text"),
            "blank lines only": ("blank.txt", b"\n  \n\n", "no text"),
            "damaged .gz": ("damaged.txt.gz", b"not gzip", "gzip"),
        }
        for label, (name, data, expect) in files.items():
            path = w / name
            path.write_bytes(data)
            self.cli(
                f"evaluate --dataset {label}",
                ["evaluate", self.pldr, "--dataset", path],
                expect if label != "empty" else "no text",
            )
            if label in ("Latin-1", "empty", "blank lines only"):
                texts_expect = "UTF-8" if label == "Latin-1" else "no non-empty line"
                self.cli(
                    f"diagnose --texts {label}",
                    ["diagnose", self.pldr, "--texts", path, "--output-dir", w / "dt"],
                    texts_expect,
                )
                self.cli(f"collapse --texts {label}", ["collapse", self.pldr, w / "ct", "--texts", path], texts_expect)
            train_expect = {"Latin-1": "utf-8", "damaged .gz": "gzip", "empty": "no text"}.get(
                label, "0 training document"
            )
            out = w / f"tt_{name}"
            self.cli(
                f"train pldrllm --dataset {label}",
                ["train", "pldrllm", "--tiny", "--dataset", path, "--output-dir", out],
                train_expect,
            )
        small = w / "small.txt"
        small.write_text("\n\n".join(f"paragraph {i} of a short text" for i in range(60)))
        self.cli(
            "train pldrllm on a corpus too small to evaluate",
            ["train", "pldrllm", "--tiny", "--dataset", small, "--output-dir", w / "tt_small", "--report-to", "none"],
            "evaluation batch",
        )
        stdin = sys.stdin
        try:
            sys.stdin = io.TextIOWrapper(io.BytesIO(b"caf\xe9\n"), encoding="utf-8", errors="surrogateescape")
            self.cli("translate stdin Latin-1", ["translate", self.agf], "UTF-8")
        finally:
            sys.stdin = stdin

    def _writing_commands(self, out: Path) -> list[tuple[str, list]]:
        """(name, argv) of every command that writes, each writing at `out` (a file or a folder as it needs)."""
        legacy = REPO_ROOT / "tests" / "fixtures" / "pldrllm_legacy_pth"
        return [
            ("evaluate --output-json", ["evaluate", self.pldr, "--max-blocks", "2", "--output-json", out / "s.json"]),
            ("evaluate --hypotheses", ["evaluate", self.agf, "--max-samples", "32", "--hypotheses", out / "h.txt"]),
            ("plot-agf --output", ["plot-agf", self.agf, "--output", out / "p.png"]),
            ("diagnose --output-dir", ["diagnose", self.pldr, "--output-dir", out / "d"]),
            ("collapse OUT_DIR", ["collapse", self.pldr, out / "c", "--force"]),
            ("push --dry-run", ["push", self.pldr, "user/model", "--dry-run", out / "p"]),
            ("lm-eval-task OUT_DIR", ["lm-eval-task", out / "l"]),
            (
                "convert OUT_DIR",
                [
                    "convert",
                    legacy / "tiny_v510.pth",
                    out / "v",
                    "--max-position-embeddings",
                    "32",
                    "--tokenizer",
                    legacy / "tokenizer.model",
                ],
            ),  # fmt: skip
            ("train agf --output-dir", ["train", "agf", "--tiny", "--max-steps", "1", "--output-dir", out / "t"]),
        ]

    def cli_file_size_limit(self) -> None:
        """The class: every command that writes, with a file-size limit of 256 bytes (`ulimit -f`; writes past it fail
        with EFBIG as on a full disk): one line naming the path, exit 1, nothing half-written left behind."""
        import resource
        import signal

        limit = self.work / "limited"
        limit.mkdir()
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing
        try:
            for name, argv in self._writing_commands(limit):
                resource.setrlimit(resource.RLIMIT_FSIZE, (256, hard))
                try:
                    verdict, detail = _cli([str(a) for a in argv], "too large")
                finally:
                    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
                left = sorted(p.name for p in limit.iterdir())
                if verdict == "clear" and left:
                    verdict, detail = "data loss", f"left behind: {left}; {detail}"
                self.record(f"{name} past a 256-byte file-size limit", "cli", verdict, detail)
                for path in limit.iterdir():
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        finally:
            signal.signal(signal.SIGXFSZ, previous)

    @contextlib.contextmanager
    def _mounted(self, name: str, options: str):
        """A folder on a small tmpfs mounted with `options` (`ro`: read-only; `size=64k`: a disk that fills up), or
        None where this process may not mount (not root, no capability): those cases are then not run."""
        import subprocess

        folder = self.work / name
        folder.mkdir()
        if os.geteuid() != 0:
            if options == "ro":  # without root a folder without write permission is read-only enough
                folder.chmod(0o555)
                yield folder
                folder.chmod(0o755)
            else:
                yield None
            return
        mount = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"{options},size=64k" if options == "ro" else options, "tmpfs", folder],
            capture_output=True,
        )
        if mount.returncode != 0:
            yield None
            return
        try:
            yield folder
        finally:
            subprocess.run(["umount", folder], capture_output=True)

    def cli_mounted_faults(self) -> None:
        """The class: every command that writes, into a read-only folder and onto a full disk (a 64 KiB tmpfs, so
        the fault is the file system's own: EROFS / ENOSPC): one line naming the path, exit 1 or 2, nothing left."""
        for label, options, expect in (
            ("a read-only folder", "ro", "read-only"),
            ("a full disk", "size=64k", "space"),
        ):
            with self._mounted(f"mounted_{options.split(',')[0]}", options) as folder:
                if folder is None:
                    print(f"not run: writing into {label} needs root (mount) here", file=sys.stderr)
                    continue
                filler = folder / ".filler"
                if options != "ro":  # fill the disk: every later write fails with ENOSPC
                    with contextlib.suppress(OSError), open(filler, "wb") as handle:
                        while True:
                            handle.write(b"\0" * 4096)
                            handle.flush()
                for name, argv in self._writing_commands(folder):
                    verdict, detail = _cli([str(a) for a in argv], expect)
                    if verdict == "unclear" and expect == "read-only" and "permission denied" in detail.lower():
                        verdict = "clear"  # the chmod form of a read-only folder
                    left = sorted(p.name for p in folder.iterdir() if p != filler)
                    if verdict == "clear" and left:
                        verdict, detail = "data loss", f"left behind: {left}; {detail}"
                    self.record(f"{name} into {label}", "cli", verdict, detail)
                    for path in folder.iterdir():
                        if path != filler:
                            shutil.rmtree(path) if path.is_dir() else path.unlink()

    def cli_concurrent_twins(self) -> None:
        """The class: two copies of a writing command started together into one folder. One writes it whole, the
        other refuses with one line; no traceback, no half-written folder, no staging folder left."""
        import subprocess

        runner = [sys.executable, "-c", "import sys; from plldr_hf.cli import main; sys.exit(main(sys.argv[1:]))"]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        for name, argv in self._writing_commands(self.work / "twins"):
            if not name.startswith(("collapse", "convert", "lm-eval-task", "push")):
                continue  # the folder-writing commands; file outputs are single atomic renames
            target = Path(
                argv[2]
                if name.startswith(("collapse", "convert"))
                else argv[-1]
                if name.startswith("push")
                else argv[1]
            )
            procs = [
                subprocess.Popen(
                    [*runner, *map(str, argv)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
                for _ in range(2)
            ]
            results = [(proc.wait(timeout=300), proc.stderr.read()) for proc in procs]
            codes = sorted(code for code, _ in results)
            errors = [err.strip().splitlines()[-1] for code, err in results if code != 0 and err.strip()]
            leftovers = [p.name for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.")]
            if any("Traceback" in err for _, err in results):
                verdict, detail = "traceback", errors[0][:200] if errors else "traceback"
            elif codes[0] != 0 or not (target / "config.json").is_file() and not name.startswith("lm-eval"):
                verdict, detail = "data loss", f"exit codes {codes}; {target} not complete"
            elif leftovers:
                verdict, detail = "data loss", f"left behind: {leftovers}"
            elif codes[1] != 0 and not all(e.startswith("plldr-hf") and ": error:" in e for e in errors):
                verdict, detail = "unclear", errors[0][:200]
            else:
                verdict, detail = "clear", f"exit codes {codes}" + (f"; {errors[0][:150]}" if errors else "")
            self.record(f"{name}: two at once into one folder", "cli", verdict, detail)
            shutil.rmtree(target, ignore_errors=True)

    def api_models(self) -> None:
        import torch

        from tests.utils import tiny_agf, tiny_model

        pldr = tiny_model()
        vocab = pldr.config.vocab_size
        ids = torch.randint(0, vocab, (2, 6))
        self.api("PLDR 3-D input_ids", lambda: pldr(ids[None]), "input_ids")
        self.api("PLDR 3-D attention_mask", lambda: pldr(ids, attention_mask=torch.ones(2, 1, 6)), "attention_mask")
        self.api(
            "PLDR token id = vocab",
            lambda: pldr(ids.clamp(max=vocab - 1).index_fill(1, torch.tensor([2]), vocab)),
            "vocab",
        )
        self.api("PLDR negative token id", lambda: pldr(ids.index_fill(1, torch.tensor([0]), -1)), "vocab")

        def cached_step():
            out = pldr(ids, use_cache=True)
            pldr(torch.full((2, 1), vocab + 5), past_key_values=out.past_key_values, use_cache=True)

        self.api("PLDR out-of-range id on a cached step", cached_step, "vocab")
        self.api("PLDR labels of another batch", lambda: pldr(ids, labels=ids[:1]), "labels")
        self.api("PLDR float input_ids", lambda: pldr(ids.float()), "input_ids")

        agf = tiny_agf()
        v = agf.config.vocab_size
        src = torch.randint(3, v, (2, 5))
        self.api("AGF 3-D input_ids", lambda: agf(input_ids=src[None], decoder_input_ids=src), "input_ids")
        self.api("AGF labels of another batch", lambda: agf(input_ids=src, labels=src[:1]), "labels")
        self.api(
            "AGF token id = vocab", lambda: agf(input_ids=src.index_fill(1, torch.tensor([1]), v), labels=src), "vocab"
        )

        def agf_cached():
            out = agf(input_ids=src, decoder_input_ids=src[:, :2], use_cache=True)
            agf(
                encoder_outputs=(out.encoder_last_hidden_state,),
                decoder_input_ids=torch.full((2, 1), v + 1),
                past_key_values=out.past_key_values,
                use_cache=True,
            )

        self.api("AGF out-of-range id on a cached step", agf_cached, "vocab")

        # every argument of a call that carries ids, positions, labels, embeddings, a cache or weights, with a value
        # of the wrong shape, type or range
        n = ids.shape[1]
        bad_calls = [
            ("PLDR negative position_ids", lambda: pldr(ids, position_ids=torch.arange(n)[None] - 3), "position_ids"),
            (
                "PLDR position_ids of another length",
                lambda: pldr(ids, position_ids=torch.arange(2)[None]),
                "position_ids",
            ),
            ("PLDR float position_ids", lambda: pldr(ids, position_ids=torch.arange(n)[None].float()), "position_ids"),
            ("PLDR inputs_embeds of another width", lambda: pldr(inputs_embeds=torch.randn(2, n, 7)), "inputs_embeds"),
            ("PLDR labels outside the vocabulary", lambda: pldr(ids, labels=ids + vocab), "labels"),
            ("PLDR float labels", lambda: pldr(ids, labels=ids.float()), "labels"),
            ("PLDR negative shift_labels", lambda: pldr(ids, shift_labels=ids - vocab), "shift_labels"),
            ("PLDR dag_weights NaN", lambda: pldr(ids, labels=ids, dag_weights=(math.nan, 0, 0)), "dag_weights"),
            ("PLDR dag_weights negative", lambda: pldr(ids, labels=ids, dag_weights=(0, -1, 0)), "dag_weights"),
            ("PLDR dag_weights of two", lambda: pldr(ids, labels=ids, dag_weights=(0, 0)), "dag_weights"),
            ("PLDR a tuple cache", lambda: pldr(ids, past_key_values=((ids, ids),)), "Cache"),
            (
                "AGF negative decoder_position_ids",
                lambda: agf(src, decoder_input_ids=src, decoder_position_ids=-src),
                "position_ids",
            ),
            ("AGF labels outside the vocabulary", lambda: agf(input_ids=src, labels=src + v), "labels"),
            ("AGF float labels", lambda: agf(input_ids=src, labels=src.float()), "labels"),
            (
                "AGF labels of another length than the decoder ids",
                lambda: agf(src, decoder_input_ids=src[:, :2], labels=src),
                "labels",
            ),
            (
                "AGF encoder output of another width",
                lambda: agf(encoder_outputs=(torch.randn(2, 5, 7),), decoder_input_ids=src),
                "encoder output",
            ),
            (
                "AGF inputs_embeds of another width",
                lambda: agf(inputs_embeds=torch.randn(2, 5, 7), decoder_input_ids=src),
                "inputs_embeds",
            ),
            ("AGF a tuple cache", lambda: agf(src, decoder_input_ids=src, past_key_values=((src, src),)), "Cache"),
        ]
        from plldr_hf.models.pldrllm.diagnostics import diagnose

        # the methods that measure or change a model: every number they take, and calibration inputs of every
        # wrong kind
        for label, value in (("NaN", math.nan), ("inf", math.inf), ("-1", -1), ("'x'", "x")):
            bad_calls.append(
                (f"PLDR collapse(tolerance={label})", lambda v=value: pldr.collapse(tolerance=v), "tolerance")
            )
            bad_calls.append((f"PLDR diagnose(rtol={label})", lambda v=value: diagnose(pldr, rtol=v), "rtol"))
            bad_calls.append(
                (f"PLDR diagnose(new_tokens={label})", lambda v=value: diagnose(pldr, new_tokens=v), "new_tokens")
            )
            bad_calls.append(
                (f"AGF coefficient_curves({label})", lambda v=value: agf.coefficient_curves(v), "max_distance")
            )
        bad_calls += [
            ("AGF coefficient_curves(10**9)", lambda: agf.coefficient_curves(10**9), "max_distance"),
            ("PLDR collapse(calibration=5)", lambda: pldr.collapse(calibration=5), "calibration"),
            ("PLDR collapse(float calibration)", lambda: pldr.collapse(calibration=torch.rand(3, 4)), "calibration"),
            (
                "PLDR collapse(calibration of floats)",
                lambda: pldr.collapse(calibration=[[1.5, 2.0], [3, 4]]),
                "calibration",
            ),
        ]
        for case, call, expect in bad_calls:
            self.api(case, call, expect)

    def api_configs(self) -> None:
        from plldr_hf import AgfConfig, PldrllmConfig

        cases = [
            ("PLDR reference_rope='false'", PldrllmConfig, {"reference_rope": "false"}, "reference_rope"),
            ("PLDR attention_bias='false'", PldrllmConfig, {"attention_bias": "false"}, "attention_bias"),
            ("PLDR rope_theta NaN", PldrllmConfig, {"rope_theta": math.nan}, "rope_theta"),
            ("PLDR dag_weight_g_lm NaN", PldrllmConfig, {"dag_weight_g_lm": math.nan}, "dag_weight_g_lm"),
            ("PLDR odd head_dim", PldrllmConfig, {"hidden_size": 30, "num_attention_heads": 2}, "head_dim"),
            ("PLDR attention_dropout 'x'", PldrllmConfig, {"attention_dropout": "x"}, "attention_dropout"),
            ("AGF pcmv='false'", AgfConfig, {"pcmv": "false"}, "pcmv"),
            ("AGF rope_theta NaN", AgfConfig, {"rope_theta": math.nan}, "rope_theta"),
            ("AGF agf_min_radius NaN", AgfConfig, {"agf_min_radius": math.nan}, "agf_min_radius"),
            ("AGF dropout 'x'", AgfConfig, {"dropout": "x"}, "dropout"),
            ("AGF init_std 'x'", AgfConfig, {"init_std": "x"}, "init_std"),
            ("AGF activation_function 'nope'", AgfConfig, {"activation_function": "nope"}, "activation_function"),
            ("AGF position_encoding 'nope'", AgfConfig, {"position_encoding": "nope"}, "position_encoding"),
        ]
        # by class: every field of both configs whose default is a number or a boolean gets values of the wrong
        # type (a string, a list), NaN and infinity; every token id gets a list and a boolean
        for family, cls in (("PLDR", PldrllmConfig), ("AGF", AgfConfig)):
            for name, parameter in inspect.signature(cls.__init__).parameters.items():
                default = parameter.default
                if isinstance(default, bool):
                    values = {"'false'": "false", "2": 2}
                elif isinstance(default, int | float):
                    values = {"'x'": "x", "[1]": [1], "NaN": math.nan, "inf": math.inf}
                else:
                    continue
                if name.endswith("token_id"):
                    values["True"] = True
                    if family == "PLDR" and name == "eos_token_id":  # generation may stop at a list of ids
                        del values["[1]"]
                        values["[99999]"] = [99_999]  # ... inside the vocabulary
                for label, value in values.items():
                    cases.append((f"{family} {name}={label}", cls, {name: value}, name))
        for case, cls, kwargs, expect in cases:
            self.api(case, lambda cls=cls, kwargs=kwargs: cls(**kwargs), expect)

        # the same values set after construction (`from_pretrained(..., field=value)`, `update()`, assignment skip
        # `__init__`): building a model from the config must name them
        from plldr_hf import AgfForConditionalGeneration, PldrllmForCausalLM
        from tests.utils import tiny_agf_config, tiny_config

        families = (
            ("PLDR", PldrllmConfig, tiny_config, PldrllmForCausalLM),
            ("AGF", AgfConfig, tiny_agf_config, AgfForConditionalGeneration),
        )
        for family, cls, make, model_class in families:
            for name, parameter in inspect.signature(cls.__init__).parameters.items():
                if isinstance(parameter.default, bool):
                    values = {"'false'": "false"}
                elif isinstance(parameter.default, int | float):
                    values = {"'x'": "x", "NaN": math.nan}
                else:
                    continue
                for label, value in values.items():

                    def build(make=make, model_class=model_class, name=name, value=value):
                        config = make()
                        setattr(config, name, value)
                        model_class(config)

                    self.api(f"{family} model from a config whose {name} became {label}", build, name)

    def api_files(self) -> None:
        import torch

        from plldr_hf import load_predefined_g

        w = self.work
        marker = w / "ran"

        class _Runs:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))

        evil = w / "evil.pkl"
        evil.write_bytes(pickle.dumps([_Runs()]))
        self.api("predefined-G pickle running a command", lambda: load_predefined_g(evil), "os")
        if marker.exists():
            self.record("predefined-G pickle ran code", "api", "data loss", "the marker file was created")

        class _ZeroStride:
            def __reduce__(self):
                import collections

                typed = torch.storage.TypedStorage(
                    wrap_storage=torch.zeros(1).untyped_storage(), dtype=torch.float32, _internal=True
                )
                return (
                    torch._utils._rebuild_tensor_v2,
                    (typed, 0, (1, 16, 4000, 4000), (0, 0, 0, 0), False, collections.OrderedDict()),
                )

        bomb = w / "bomb.pkl"
        bomb.write_bytes(pickle.dumps([_ZeroStride()]))
        self.api("predefined-G zero-stride allocation bomb", lambda: load_predefined_g(bomb), "stored data")
        text = w / "g.txt"
        text.write_text("not a pickle")
        self.api("predefined-G not a pickle", lambda: load_predefined_g(text), "pickle")
        scalar = w / "scalar.pkl"
        scalar.write_bytes(pickle.dumps(torch.zeros(3)))
        self.api("predefined-G wrong structure", lambda: load_predefined_g(scalar), "list")


# numeric flags whose negative values mean something (a negative length penalty favours shorter translations)
SIGNED_FLAGS = {"--length-penalty", "--length_penalty"}


def _refuses(convert, value: str) -> bool:
    try:
        convert(value)
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return True
    return False


def _option_spec(path, dest: str):
    """The options field behind a `train` flag (None for other commands)."""
    if not path or path[0] != "train":
        return None
    from plldr_hf.training.options import TrainOptions, TranslationOptions

    options = TrainOptions if path[-1] == "pldrllm" else TranslationOptions
    return next((f for f in dataclasses.fields(options) if f.name == dest), None)


def _option_needs_positive(path, dest: str) -> bool:
    """Whether a `train` flag's options field must be above 0 (the options check it, not the flag's type)."""
    spec = _option_spec(path, dest)
    return (
        spec is not None
        and spec.metadata.get("min") in (0, 1)
        and "float" in str(spec.type)
        or (spec is not None and spec.metadata.get("min") == 1)
    )


def numeric_flags(parser, path=()) -> list:
    """(command path, action) for every flag of every (sub)command whose values are numbers; a `train FAMILY`
    command's flags are those of its options' parser (every `TrainingArguments` field among them)."""
    found = []
    if len(path) == 2 and path[0] == "train":
        from plldr_hf.training import options
        from plldr_hf_cli.commands.train import options_parser

        options_class = options.TrainOptions if path[1] == "pldrllm" else options.TranslationOptions
        parser = options_parser(options_class, " ".join(path))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += numeric_flags(sub, (*path, name))
        elif action.help == argparse.SUPPRESS:
            continue  # a hidden spelling (`--learning_rate`) of a visible flag, which shares its type and checks
        elif action.option_strings and callable(action.type) and action.type is not str:
            try:
                value = action.type("1")
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found.append((list(path), action))
    return found


def summarise(outcomes: list[Outcome]) -> tuple[dict[str, int], str]:
    counts = {"cases": len(outcomes)}
    for verdict in ("clear", "silent", "traceback", "unclear", "data loss"):
        counts[verdict] = sum(o.verdict == verdict for o in outcomes)
    lines = ["| outcome | cases |", "|---|---|", *(f"| {k} | {v} |" for k, v in counts.items())]
    bad = [o for o in outcomes if o.verdict != "clear"]
    if bad:
        lines += ["", "| case | outcome | what happened |", "|---|---|---|"]
        lines += [f"| {o.case} | {o.verdict} | {o.detail.replace('|', '/')} |" for o in bad]
    return counts, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="folder for probe.json and probe.md (default: a temporary folder)")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets  # noqa: F401  (its log handler binds this stderr, not the StringIO a case captures into)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the probe's own fixtures are saved without bars
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # relative paths of the cases resolve inside the scratch folder
        try:
            outcomes = Probe(Path(tmp)).run()
        finally:
            os.chdir(cwd)
    counts, table = summarise(outcomes)
    if args.verbose:
        for o in outcomes:
            print(f"{o.verdict:>9}  {o.kind}  {o.case}: {o.detail}")
    print(table)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "probe.json").write_text(
            json.dumps({"counts": counts, "cases": [asdict(o) for o in outcomes]}, indent=2) + "\n"
        )
        (out / "probe.md").write_text(table + "\n")
    return 0 if counts["clear"] == counts["cases"] else 1


if __name__ == "__main__":
    sys.exit(main())
