"""A training run killed with SIGKILL resumes with `--resume` and ends where an uninterrupted run ends."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.utils import REPO_ROOT


FLAGS = (
    "train pldrllm --tiny --max-steps 12 --save-steps 3 --save-total-limit 10 --logging-steps 1 --eval-steps 0 "
    "--max-train-documents 300 --vocab-size 400 --report-to none --dag-weights 0.01"
).split()


def _command(out, *extra):
    return [sys.executable, "-m", "plldr_hf", *FLAGS, "--output-dir", str(out), *extra]


def _final_loss(out) -> float:
    history = json.loads((out / "log_history.json").read_text())
    return [e["loss"] for e in history if "loss" in e and e.get("step") == 12][-1]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_then_resume_reaches_the_uninterrupted_loss(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    reference = tmp_path / "uninterrupted"
    subprocess.run(_command(reference), check=True, capture_output=True, env=env, cwd=REPO_ROOT, timeout=600)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        _command(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO_ROOT
    )
    deadline = time.time() + 600
    while not (killed / "checkpoint-6" / "trainer_state.json").exists():
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "model.safetensors").exists(), "the run finished before the kill"

    resumed = subprocess.run(
        _command(killed, "--resume"), capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _final_loss(killed) == pytest.approx(_final_loss(reference), rel=1e-5)


def test_corrupt_checkpoint_gets_an_error_naming_the_file(tmp_path, capsys):
    from plldr_hf.cli import main

    out = tmp_path / "run"
    at = FLAGS.index("--max-steps")
    argv = [*FLAGS[: at + 1], "3", *FLAGS[at + 2 :]]  # a 3-step run with one checkpoint
    assert main([*argv, "--output-dir", str(out)]) == 0
    weights = out / "checkpoint-3" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    capsys.readouterr()
    assert main([*argv, "--output-dir", str(out), "--resume", str(out / "checkpoint-3")]) == 2
    err = capsys.readouterr().err
    assert "model.safetensors" in err and "corrupt or truncated" in err


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_a_checkpoint_file_that_would_run_code_is_refused_in_one_line_without_running_it(tmp_path, capsys, name):
    import torch

    from plldr_hf.cli import main

    out = tmp_path / "run"
    at = FLAGS.index("--max-steps")
    argv = [*FLAGS[: at + 1], "3", *FLAGS[at + 2 :]]
    assert main([*argv, "--output-dir", str(out)]) == 0
    marker = tmp_path / "ran"
    torch.save({"state": _RunsCode(marker)}, out / "checkpoint-3" / name)
    capsys.readouterr()
    assert main([*argv, "--output-dir", str(out), "--resume", str(out / "checkpoint-3")]) == 2
    err = capsys.readouterr().err
    assert name in err and "weights-only load refuses" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1
    assert not marker.exists()
