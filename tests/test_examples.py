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
