"""Output folders of the commands: nothing replaced that the command did not make, nothing half-made left behind,
one writer at a time.

Three rules, shared by every command that writes a folder:

- **No silent overwrite.** A non-empty folder is refused unless `--overwrite` is given (training also accepts it
  with `--resume`, to continue the run inside it).
- **No half-made folders.** When the work fails, whatever this run created is removed. One-shot commands
  (collapse, lm-eval-task, diagnose, push --dry-run) write into a hidden staging folder beside the target and move
  it into place only when everything succeeded, so a failure or a crash never leaves a mixed folder, and
  `--overwrite` replaces the old folder only then.
- **One writer.** Long runs (train, quickstart) hold `OUT_DIR/.plldr-hf.lock` (pid and host); a second run into
  the same folder is refused while the first lives, and a lock left by a process that no longer exists is taken
  over with a note.

Nothing here imports torch, transformers or `plldr_hf`.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from plldr_hf_cli.arguments import fail


__all__ = [
    "LOCK_NAME",
    "OutputFileError",
    "OutputRefused",
    "add_overwrite_flag",
    "check_output",
    "interrupts_deferred",
    "run_in_folder",
    "write_file",
    "write_staged",
]

LOCK_NAME = ".plldr-hf.lock"


class OutputRefused(Exception):
    """The output folder may not be written (not empty, locked by a live run, a file); the message says why."""


class OutputFileError(Exception):
    """A file system fault while writing an output (read-only, disk full, file too large); one line, exit 1."""

    exit_status = 1


@contextmanager
def interrupts_deferred():
    """Ctrl-C (SIGINT) during the block is acted on when the block ends, as a `KeyboardInterrupt`. For loading
    torch and the libraries a command runs on: an import cut halfway was seen to lose the interrupt (the run went
    on training) or to end the process killed by the signal instead of with its one line. Only the main thread can
    hold the signal, and only Python's own handler is replaced (an ignored SIGINT, as in a background job, stays
    ignored; a handler of the caller's stays in place); otherwise the block runs as it is."""
    main_thread = threading.current_thread() is threading.main_thread()
    if not main_thread or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def write_file(path, write) -> Path:
    """Write one output file atomically: `write(temporary_path)` fills a hidden file beside `path`, which then
    replaces `path` (a rename); a fault leaves neither a half-written file nor a changed `path`, and is one line
    naming the path and the cause."""
    path = Path(path)
    # the name ends as the path does, so a writer that reads the format off the suffix (matplotlib) sees the same one,
    # none included
    staging = path.parent / f".partial-{os.getpid()}-{path.name}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(staging)
        os.replace(staging, path)
    except OSError as error:
        staging.unlink(missing_ok=True)
        raise OutputFileError(f"could not write {path}: {error.strerror or error}") from None
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    return path


def add_overwrite_flag(parser, what: str = "OUT_DIR") -> None:
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace a non-empty {what} (default: refuse it, so nothing is lost by mistake)",
    )


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != LOCK_NAME) if folder.is_dir() else []


def check_output(command: str, path, *, overwrite: bool = False, resume: bool = False) -> int | None:
    """Exit status 2 with one line when `path` is a file, or a non-empty folder given without `--overwrite` (or,
    for training, `--resume`); None when the command may write there. Checked before any work."""
    if path is None:
        return None
    path = Path(path)
    if path.exists() and not path.is_dir():
        return fail(command, f"{path} is a file, not a folder; give a folder for the output")
    holder = _live_lock(path)
    if holder is not None:
        return fail(
            command,
            f"{path} is in use by another run ({holder}); wait for it to finish, or remove {path / LOCK_NAME} if "
            "that run is gone",
        )
    entries = _entries(path)
    if entries and not (overwrite or resume):
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        fix = "pass --overwrite to replace it" + (
            ", or --resume to continue the run in it" if command.startswith("train") else ""
        )
        return fail(command, f"{path} is not empty ({len(entries)} entries: {shown}); choose a new folder or {fix}")
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _take_lock(folder: Path, command: str) -> Path:
    """Create `folder/.plldr-hf.lock` atomically (O_EXCL); a stale lock (its process is gone) is replaced."""
    lock = folder / LOCK_NAME
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": f"plldr-hf {command}"})
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = _live_lock(folder)
            if holder is not None:
                raise OutputRefused(
                    f"{folder} is in use by another run ({holder}); wait for it to finish, or remove {lock} if that "
                    "run is gone"
                ) from None
            print(f"plldr-hf {command}: note: removed a stale lock in {folder}", file=sys.stderr)
            lock.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(record + "\n")
        return lock
    raise OutputRefused(f"could not lock {folder}; remove {lock} and retry")


def _fault(command: str, path: Path, error: BaseException) -> int:
    """A file system fault (read-only, disk full, file too large) as one line naming the path; exit status 1."""
    message = file_system_fault(error, path) or f"could not write {path}: {getattr(error, 'strerror', None) or error}"
    print(f"plldr-hf {command}: error: {message}", file=sys.stderr)
    return 1


# errno values of a file system that cannot take the output: read-only, full, over quota, file too large, no access
_FAULTS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM}


def file_system_fault(error: BaseException, path=None) -> str | None:
    """What a file system fault says (None for any other error): an `OSError` with one of `_FAULTS`, or the same
    fault raised by a Rust library (tokenizers, safetensors) as a plain exception ending in `(os error N)`. `path`:
    the output being written, named when the error names no file."""
    if isinstance(error, OSError) and error.errno in _FAULTS:
        # a copy names its source first and its destination second: the destination is what could not be written
        path = getattr(error, "filename2", None) or error.filename or path
        if path is None:
            return f"could not write a file: {error.strerror or error} (a full disk or a file-size limit, ulimit -f?)"
        return f"could not write {path}: {error.strerror or error}"
    match = re.search(r"\(os error (\d+)\)", str(error))
    if match and int(match.group(1)) in _FAULTS:
        where = f"could not write {path}" if path else "could not write"
        return f"{where}: {os.strerror(int(match.group(1)))} ({' '.join(str(error).split())[:200]})"
    return None


def _failed(command: str, error: Exception, path) -> int:
    """The exit status and one line for an error raised while writing: 1 for a file system fault, 2 for a user
    error (bad values, missing or unreadable inputs)."""
    if file_system_fault(error, path) is not None:
        return _fault(command, path, error)
    return fail(command, _message(error))


def _is_user_error(error: BaseException) -> bool:
    # bad values (a model config's `@strict` checks included), missing or unreadable files, the datasets library's
    # load errors (a malformed --dataset file): one line for the user; anything else is a defect and keeps its traceback
    from huggingface_hub.errors import StrictDataclassError

    return (
        isinstance(error, (ValueError, OSError, OutputRefused, StrictDataclassError))
        or type(error).__module__.startswith("datasets")
        or file_system_fault(error) is not None
    )


def _message(error: BaseException) -> str:
    # the datasets library wraps the reader's error (a JSON parse error with the file and row) in a generic one
    cause = error.__cause__ or error.__context__
    if type(error).__module__.startswith("datasets") and cause is not None:
        return f"could not read the dataset: {cause}"
    return str(error)


def _live_lock(folder: Path) -> str | None:
    """Who holds `folder`'s lock, if a live process does (None: no lock, or a stale one)."""
    try:
        holder = json.loads((folder / LOCK_NAME).read_text())
        pid, host = int(holder["pid"]), str(holder["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if host == socket.gethostname() and not _alive(pid):
        return None
    return f"{holder.get('command', 'plldr-hf')}, pid {pid} on {host}"


def readable_like_umask(folder: Path) -> None:
    """Give the files a command wrote the permissions the user's umask asks for: safetensors creates its files with
    mode 0600, so a model folder shared with a group (or served by another user) could not be read."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_mode & 0o777 == 0o600:
            path.chmod(0o666 & ~umask)


def is_main_process() -> bool:
    """Whether this is the main process (rank 0) of a distributed launch, or the only process. The launchers set
    `RANK` before the command starts, so this is known before torch is imported."""
    return os.environ.get("RANK", "0") == "0"


def run_in_folder(command: str, path, work, *, overwrite: bool = False, resume: bool = False):
    """Run `work()` writing into `path` in place (training: its checkpoints live there while it runs).

    Refuses a non-empty folder unless `overwrite` (its old contents are then deleted first) or `resume`; holds
    the folder's lock while working. On failure it removes the folder if this run created it (or the entries it
    added to an emptied `--overwrite` folder) and prints one line for a user error (exit 2). On Ctrl-C the folder
    is kept, so the run can be resumed."""
    if not is_main_process():
        # another process of a distributed launch (torchrun, accelerate launch): the main process checks, locks and
        # cleans the folder, as Trainer has only the main process write; this one works in it
        return work()
    refused = check_output(command, path, overwrite=overwrite, resume=resume)
    if refused:
        return refused
    folder = Path(path)
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = _take_lock(folder, command)
    except OutputRefused as error:
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        return fail(command, error)
    except OSError as error:
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        return _fault(command, folder, error)
    try:
        if overwrite and not resume:
            for name in _entries(folder):
                target = folder / name
                shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
        before = set(_entries(folder))
        try:
            status = work()
            readable_like_umask(folder)
            return status
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            if created:
                shutil.rmtree(folder, ignore_errors=True)
            elif not before:
                for name in set(_entries(folder)) - before:
                    target = folder / name
                    shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
            if isinstance(error, Exception) and _is_user_error(error):
                return _failed(command, error, folder)
            raise
    finally:
        lock.unlink(missing_ok=True)


def write_staged(command: str, path, work, *, overwrite: bool = False):
    """Run `work(staging)`, which writes the whole output into a fresh hidden folder beside `path`; when it
    returns without error the staging folder replaces `path` (renames on one file system), else it is removed.

    A non-empty `path` is refused unless `overwrite`, checked before the work and again before the swap (another
    command may have written there meanwhile)."""
    refused = check_output(command, path, overwrite=overwrite)
    if refused:
        return refused
    path = Path(path)
    staging = path.parent / f".{path.name}.partial-{os.getpid()}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
    except OSError as error:
        return _fault(command, path, error)
    try:
        result = work(staging)
        if result:  # the work refused with an exit status of its own
            return result
        readable_like_umask(staging)
        if _entries(path) and not overwrite:
            raise OutputRefused(f"{path} was filled by something else meanwhile; nothing was replaced")
        old = path.parent / f".{path.name}.old-{os.getpid()}"
        if path.exists():
            path.rename(old)
        try:
            staging.rename(path)
        except OSError:
            if old.exists():
                old.rename(path)  # put the previous folder back: nothing lost
            raise
        shutil.rmtree(old, ignore_errors=True)
        return 0
    except KeyboardInterrupt:
        raise
    except Exception as error:
        if _is_user_error(error):
            return _failed(command, error, path)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
