"""The `train` command as users launch it with several processes: `torchrun --nproc_per_node 2 -m plldr_hf train
pldrllm --tiny` and `accelerate launch --multi_gpu --num_processes 2 -m plldr_hf train pldrllm --tiny` (gloo on the
CPU) train two processes (twice one process's tokens per step) into one folder, and only the main process takes
the folder's lock."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.utils import REPO_ROOT


FLAGS = ["train", "pldrllm", "--tiny", "--max-steps", "2", "--logging-steps", "1", "--report-to", "none",
         "--no-progress"]  # fmt: skip


def _tokens_per_step(folder) -> list[int]:
    history = json.loads((folder / "log_history.json").read_text())
    return [entry["num_input_tokens_seen"] for entry in history if "loss" in entry]


def _launch(launcher: list[str], out, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [*launcher, "-m", "plldr_hf", *FLAGS, "--output-dir", str(out)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one")
    _launch([sys.executable], tmp / "p1", tmp)
    return _tokens_per_step(tmp / "p1")


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_two_processes_train_into_one_folder(launcher, one_process, tmp_path):
    if launcher == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]
    else:
        accelerate = shutil.which("accelerate", path=os.path.dirname(sys.executable)) or shutil.which("accelerate")
        command = [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                   "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"]  # fmt: skip
    out = tmp_path / "p2"
    proc = _launch(command, out, tmp_path)
    assert _tokens_per_step(out) == [2 * tokens for tokens in one_process]
    assert "in use by another run" not in proc.stderr
    assert proc.stdout.count("validation perplexity:") == 1  # the main process reports
    assert (out / "model.safetensors").is_file() and not (out / ".plldr-hf.lock").exists()


def test_ctrl_c_ends_both_ranks_in_one_line_and_resume_continues_the_losses(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]
    flags = ["-m", "plldr_hf", "train", "pldrllm", "--tiny", "--max-steps", "8", "--save-steps", "2",
             "--logging-steps", "1", "--report-to", "none", "--no-progress"]  # fmt: skip

    def losses(folder):
        history = json.loads((folder / "log_history.json").read_text())
        return {entry["step"]: entry["loss"] for entry in history if "loss" in entry}

    full = tmp_path / "full"
    subprocess.run([*torchrun, *flags, "--output-dir", str(full)], env=env, cwd=tmp_path, timeout=600, check=True,
                   capture_output=True)  # fmt: skip
    out = tmp_path / "interrupted"
    run = subprocess.Popen([*torchrun, *flags, "--output-dir", str(out)], env=env, cwd=tmp_path, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    deadline = time.time() + 300
    while not (out / "checkpoint-2" / "trainer_state.json").exists():
        assert run.poll() is None and time.time() < deadline, "no checkpoint-2 before the run ended"
        time.sleep(0.2)
    os.killpg(run.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the launcher and every rank
    _, err = run.communicate(timeout=120)
    # one line from the command (torchrun adds its own SignalException report after it)
    assert err.count("plldr-hf train pldrllm: interrupted") == 1, err[-3000:]
    assert "--resume" in err
    resumed = subprocess.run([*torchrun, *flags, "--output-dir", str(out), "--resume"], env=env, cwd=tmp_path,
                             timeout=600, capture_output=True, text=True)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected, got = losses(full), losses(out)
    assert sorted(got) == list(range(1, 9))
    for step in range(3, 9):
        assert got[step] == pytest.approx(expected[step], rel=1e-5), step


def test_translator_trains_as_one_run_of_two_processes(tmp_path):
    """`torchrun --nproc_per_node 2 -m plldr_hf train agf --tiny`: one DDP run on the CPU (gloo), not two runs that
    each think they are the main process; the tokenizer is trained once; the test split is scored once, over its
    segments once each (the rows accelerate repeats to even out the last batch are dropped), so the scored target
    tokens equal a single process's; and DDP does not warn about unused parameters."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    flags = ["-m", "plldr_hf", "train", "agf", "--tiny", "--max-steps", "4", "--report-to", "none", "--no-progress"]
    single = subprocess.run([sys.executable, *flags, "--output-dir", str(tmp_path / "p1")], env=env, cwd=tmp_path,
                            timeout=600, capture_output=True, text=True)  # fmt: skip
    assert single.returncode == 0, single.stderr[-3000:]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]
    proc = subprocess.run([*torchrun, *flags, "--output-dir", str(tmp_path / "p2")], env=env, cwd=tmp_path,
                          timeout=600, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout + proc.stderr
    assert said.count("training a bpe tokenizer") == 1 and said.count("test (32 segments)") == 1, said[-3000:]
    assert "find_unused_parameters" not in said
    one, two = (json.loads((tmp_path / run / "test_results.json").read_text()) for run in ("p1", "p2"))
    assert two["segments"] == one["segments"] == 32
    assert two["target_tokens"] == one["target_tokens"]
