"""Output folders: a non-empty folder is never replaced without --overwrite, a failed run leaves nothing half-made,
two runs never write one folder at once, and a damaged optimizer state falls back to the previous checkpoint."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

from plldr_hf.cli import main
from plldr_hf_cli.output import LOCK_NAME
from tests.utils import REPO_ROOT, tiny_model
from tests.utils import tiny_pldrllm_tokenizer as tiny_tokenizer


TRAIN = (
    "train pldrllm --tiny --max-steps 2 --logging-steps 1 --eval-steps 0 --max-train-documents 200 --vocab-size 400 "
    "--report-to none"
).split()


def _digest(folder) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def pldr_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pldr")
    tokenizer = tiny_tokenizer()
    tiny_model(vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def other_folder(tmp_path):
    """A folder someone else made (a translator's files, say) that a command is pointed at by mistake."""
    folder = tmp_path / "agf-model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "agf"}\n')
    (folder / "model.safetensors").write_bytes(b"precious")
    return folder


@pytest.mark.parametrize(
    "command",
    [
        ["collapse", "{model}", "{out}", "--force"],
        ["diagnose", "{model}", "--output-dir", "{out}", "--new-tokens", "2", "--max-texts", "1"],
        ["lm-eval-task", "{out}", "--num-questions", "8"],
        ["push", "{model}", "org/repo", "--dry-run", "{out}"],
    ],
    ids=lambda c: c[0],
)
def test_one_shot_commands_refuse_a_non_empty_folder_and_overwrite_replaces_it_whole(
    pldr_dir, other_folder, capsys, command
):
    before = _digest(other_folder)
    argv = [part.format(model=pldr_dir, out=other_folder) for part in command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not empty" in err and "--overwrite" in err, err
    assert _digest(other_folder) == before, "the refused command changed the folder"

    assert main([*argv, "--overwrite"]) == 0
    after = {p.name for p in other_folder.iterdir()}
    assert (
        "model.safetensors" not in after or _digest(other_folder)["model.safetensors"] != before["model.safetensors"]
    )
    assert not (other_folder / "config.json").exists() or '"agf"' not in (other_folder / "config.json").read_text()
    leftovers = [p.name for p in other_folder.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == [], f"staging folders left behind: {leftovers}"


def test_a_failed_one_shot_command_leaves_no_folder(pldr_dir, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("a prompt\n")
    out = tmp_path / "collapsed"
    # calibration text without a usable tokenizer: the command fails after loading the model
    assert (
        main(["collapse", str(pldr_dir), str(out), "--force", "--texts", str(texts), "--tokenizer", "/no/such"]) == 2
    )
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["texts.txt"]


def test_train_refuses_an_old_runs_folder_and_says_how_to_resume(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TRAIN, "--output-dir", str(out)]) == 0
    before = _digest(out)
    capsys.readouterr()
    assert main([*TRAIN, "--output-dir", str(out), "--max-steps", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--resume" in err and "--overwrite" in err, err
    assert _digest(out) == before, "the refused run touched the old run"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--tokenizer", "/nonexistent/tokenizer"], "tokenizer"),
        (["--dataset", "{tmp}/broken.jsonl"], "broken.jsonl"),
        (["--block-size", "100000"], "block"),
        (["--block-size", "3000"], "fewer than one batch"),
    ],
    ids=["tokenizer", "malformed-dataset", "block-size", "fewer-blocks-than-a-batch"],
)
def test_a_failed_training_run_removes_the_folder_it_created(tmp_path, capsys, extra, message):
    (tmp_path / "broken.jsonl").write_text('{"text": "fine"}\n{"text": unquoted\n')
    out = tmp_path / "run"
    argv = [*TRAIN, "--output-dir", str(out), *[part.format(tmp=tmp_path) for part in extra]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and message in err.splitlines()[-1], err
    assert err.splitlines()[-1].startswith("plldr-hf train pldrllm: error:"), err
    assert not out.exists(), f"half-made folder left: {sorted(p.name for p in out.iterdir())}"


def test_a_live_lock_refuses_a_second_run_and_a_stale_one_is_taken_over(tmp_path, capsys):
    import socket

    out = tmp_path / "run"
    out.mkdir()
    lock = out / LOCK_NAME
    # held by this (live) process: another run is writing here
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": "plldr-hf train"}))
    assert main([*TRAIN, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "in use by another run" in err and str(os.getpid()) in err, err
    assert [p.name for p in out.iterdir()] == [LOCK_NAME]

    # held by a process that has exited: stale, taken over with a note, and released at the end
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(json.dumps({"pid": int(gone.stdout), "host": socket.gethostname(), "command": "plldr-hf train"}))
    assert main([*TRAIN, "--output-dir", str(out)]) == 0
    assert "stale lock" in capsys.readouterr().err
    assert (out / "model.safetensors").exists() and not lock.exists()


def test_an_interrupt_while_the_libraries_load_is_acted_on_after_they_loaded():
    """An import cut halfway by Ctrl-C was seen to lose the interrupt or to end the process killed by SIGINT without
    its one line; the command loads torch and its pipeline with the signal held, then acts on it."""
    import signal
    import time

    from plldr_hf_cli.output import interrupts_deferred

    # Python's own handler, as a command started from a terminal has it (a test run started in the background
    # inherits an ignored SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached_the_end = False
        with pytest.raises(KeyboardInterrupt):
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler runs here: a plain one would raise now
                reached_the_end = True
        assert reached_the_end
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with interrupts_deferred():  # without a signal the block is silent
            pass
        # an ignored SIGINT (a background job) stays ignored
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def _default_sigint():
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_two_concurrent_trainings_into_one_folder_one_is_refused(tmp_path):
    import signal
    import threading
    import time

    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "plldr_hf", *TRAIN, "--output-dir", str(out)]
    first = subprocess.Popen(
        [*argv, "--max-steps", "100000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        # Ctrl-C as a terminal delivers it: the default disposition, not blocked, whatever state the test process
        # (after hundreds of in-process runs) passes on to its children
        preexec_fn=_default_sigint,
    )
    # read its progress bar as it comes: a full pipe would block the run in a write until someone reads
    chunks = []
    reader = threading.Thread(target=lambda: chunks.append(first.stderr.read()), daemon=True)
    reader.start()
    try:
        deadline = time.time() + 120
        while not (out / LOCK_NAME).exists():
            assert first.poll() is None and time.time() < deadline
            time.sleep(0.02)
        for extra in ([], ["--resume"], ["--overwrite"]):
            second = subprocess.run([*argv, *extra], capture_output=True, text=True, env=env, cwd=REPO_ROOT)
            assert second.returncode == 2 and "in use by another run" in second.stderr, second.stderr[-2000:]
            assert first.poll() is None, "the first run ended before the second was tried"
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(timeout=120)
        reader.join(timeout=60)
    err = "".join(chunks)
    # interrupted before its first checkpoint: one line saying so and how to start again
    last = err.splitlines()[-1]
    assert first.returncode == 130 and "interrupted; no checkpoint was saved yet" in last and "--overwrite" in last, (
        err[-2000:]
    )
    assert not (out / LOCK_NAME).exists(), "an interrupted run keeps its lock"


def test_resume_falls_back_past_a_truncated_optimizer_state(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [*TRAIN, "--max-steps", "4", "--save-steps", "2", "--save-total-limit", "5", "--output-dir", str(out)]
    assert main(argv) == 0
    optimizer = out / "checkpoint-4" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:1000])
    from plldr_hf.training.start import resolve_checkpoint

    assert resolve_checkpoint(True, out) == str(out / "checkpoint-2")
    with pytest.raises(ValueError, match="optimizer.pt is corrupt or truncated"):
        resolve_checkpoint(str(out / "checkpoint-4"), out)
    capsys.readouterr()
    assert main([*argv, "--max-steps", "5", "--resume"]) == 0, capsys.readouterr().err[-2000:]
    state = json.loads((out / "checkpoint-5" / "trainer_state.json").read_text())
    assert state["global_step"] == 5
