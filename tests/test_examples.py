"""The examples run as documented, on the public API only: each `--tiny` run on the CPU, in a fresh process."""

import os
import subprocess
import sys

import pytest

from tests.utils import REPO_ROOT


@pytest.mark.parametrize(
    "script, marker",
    [("train_pldr_llm.py", "validation perplexity"), ("train_agf_translation.py", "reloaded: BLEU")],
)
def test_example_runs_tiny(tmp_path, script, marker):
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}
    argv = [sys.executable, str(REPO_ROOT / "examples" / script), "--tiny", "--output-dir", str(tmp_path / "out")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert marker in proc.stdout, proc.stdout[-2000:]
    assert (tmp_path / "out" / "config.json").is_file()


def test_example_classifier_runs_tiny(tmp_path):
    argv = [sys.executable, str(REPO_ROOT / "examples" / "finetune_pldrllm_classifier.py"), "--tiny"]
    argv += ["--output-dir", str(tmp_path / "out")]
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "validation accuracy" in proc.stdout and "→" in proc.stdout


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO_ROOT / "examples").glob("*.py")))
def test_example_help_is_whole_and_defaults_need_no_test_fixture(script):
    text = (REPO_ROOT / "examples" / script).read_text(encoding="utf-8")
    # a user's copy of an example has no tests/ folder
    assert "tests/fixtures" not in text and '"tests"' not in text
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / script), "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    description = proc.stdout.split("\n\n")[1]
    # the description is a whole paragraph: it ends with a full stop, not mid-sentence
    assert description.rstrip().endswith((".", ")", ":")), description
