"""Where a training run starts, for both families: `starting_point(options)` is the one call a pipeline makes.

- **Resumed**: the checkpoint to resume from (`resolve_checkpoint`: the newest complete `checkpoint-*` of the output
  folder, a run killed while writing its last one resumes from the one before, or a named folder), checked before
  Trainer reads it (`check_checkpoint`: incomplete, corrupt or another model's files are named); the run's settings
  and data compared with what the run was started with (`check_data_unchanged`, `data_fingerprint.json`).
- **From an existing model** (`init_from`: a saved folder or a Hub id): its model and tokenizer through
  `plldr_hf.loading` (family check, damaged or mismatched weights named), and with `lora_r` the `peft.LoraConfig`
  the pipeline wraps it with (rank r, alpha 2r, on the family's `ModelFamily.lora_target_modules`).
- **Fresh**: no model (the pipeline builds one of the recipe's config), the tokenizer given (`tokenizer=`,
  `options.tokenizer`) or none (the run trains one, or reuses the one it saved).
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


logger = logging.getLogger(__name__)

__all__ = [
    "StartingPoint",
    "check_checkpoint",
    "check_data_unchanged",
    "data_fingerprint",
    "resolve_checkpoint",
    "starting_point",
]

# spellings of "the newest checkpoint in the output folder" (`--resume` without a value, `resume_from_checkpoint="last"`, `True`)
_LATEST = ("last", "true", "True")
# PEFT's task type of each family's main model class
_TASK_TYPES = {"AutoModelForCausalLM": "CAUSAL_LM", "AutoModelForSeq2SeqLM": "SEQ_2_SEQ_LM"}


@dataclass
class StartingPoint:
    """Where a run starts: the checkpoint it resumes from (None: the first step), the model it fine-tunes (None: a
    fresh one of the recipe's config), its tokenizer (None: the run trains one or reuses the one it saved) and the
    LoRA configuration to wrap the model with (None: every weight trains)."""

    checkpoint: str | None = None
    model: Any = None
    tokenizer: Any = None
    lora: Any = None


def starting_point(options, tokenizer=None) -> StartingPoint:
    """The starting point of a run of `options` (`TrainOptions` or `TranslationOptions`): the checkpoint to resume
    from (checked, with the run's settings and data: `check_data_unchanged`), the output folder made, and the model
    and tokenizer of `init_from`. `tokenizer`: a tokenizer object given through the Python API, which wins over
    `options.tokenizer`."""
    from plldr_hf.loading import load_model, load_tokenizer
    from plldr_hf.models import FAMILIES

    family = FAMILIES[options.FAMILY]
    # the Llama baseline's checkpoints are checked for completeness, not against a family of this package
    model_type = (
        family.model_type if getattr(options, "architecture", family.model_type) == family.model_type else None
    )
    checkpoint = resolve_checkpoint(options.resume_from_checkpoint, options.output_dir, model_type)
    Path(options.output_dir).mkdir(parents=True, exist_ok=True)
    check_data_unchanged(
        options.output_dir, options, resuming=checkpoint is not None, is_main=options.process_index == 0
    )
    if not options.init_from:
        if tokenizer is None and options.tokenizer:
            tokenizer = load_tokenizer(options.tokenizer)  # a missing folder or file is named, not a Hub-id error
        return StartingPoint(checkpoint, tokenizer=tokenizer)
    model = load_model(options.init_from, model_type=family.model_type, dtype="float32")
    if tokenizer is None:
        tokenizer = load_tokenizer(options.init_from, model_config=model.config)
    lora = None
    if options.lora_r is not None:
        from peft import LoraConfig

        lora = LoraConfig(
            task_type=_TASK_TYPES[family.auto_class],
            r=options.lora_r,
            lora_alpha=2 * options.lora_r,
            target_modules=list(family.lora_target_modules),
        )
    return StartingPoint(checkpoint, model, tokenizer, lora)


def resolve_checkpoint(
    resume: str | bool | None, output_dir: str | os.PathLike, model_type: str | None = None
) -> str | None:
    """The checkpoint folder to resume from: None when `resume` is falsy; the newest complete `checkpoint-*` in
    `output_dir` for `True` / `"last"`; otherwise `resume` itself, which must be a complete checkpoint (of the
    `model_type` family when given: `check_checkpoint`)."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if not resume:
        return None
    if isinstance(resume, (str, os.PathLike)) and str(resume) not in _LATEST:
        if not Path(resume).is_dir():
            raise FileNotFoundError(f"resume: checkpoint folder {resume} does not exist")
        check_checkpoint(resume, model_type)
        return str(resume)
    folder = Path(output_dir)
    candidates = (
        sorted(
            (p for p in folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if p.is_dir() and p.name.split("-")[-1].isdigit()),
            key=lambda p: int(p.name.split("-")[-1]),
        )
        if folder.is_dir()
        else []
    )
    if not candidates:
        raise FileNotFoundError(f"resume: no checkpoint-* folder in {output_dir}")
    # the newest complete one: a run killed while writing its last checkpoint resumes from the one before
    newest_error = None
    for candidate in reversed(candidates):
        try:
            check_checkpoint(candidate, model_type)
        except ValueError as err:
            logger.warning("skipping %s: %s", candidate.name, err)
            newest_error = newest_error or err
            continue
        return str(candidate)
    raise newest_error


def check_checkpoint(folder: str | os.PathLike, model_type: str | None = None) -> None:
    """Raise `ValueError` naming the file when a Trainer checkpoint folder is incomplete, corrupt or not this run's
    (a run killed while it was being written, a truncated copy, a `trainer_state.json` with an impossible step, a
    model of another family, weights of another model), instead of a deep error from torch or safetensors later or
    a run that trains on from the wrong weights. `model_type`: the family the run trains."""
    from safetensors import safe_open

    folder = Path(folder)
    state = folder / "trainer_state.json"
    try:
        progress = json.loads(state.read_text())
    except FileNotFoundError:
        raise ValueError(
            f"checkpoint {folder} is incomplete: {state.name} is missing (interrupted while saving?)"
        ) from None
    except (OSError, ValueError) as err:
        raise ValueError(f"checkpoint file {state} is corrupt or truncated: {err}") from err
    step = progress.get("global_step") if isinstance(progress, dict) else None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"checkpoint file {state} is damaged: global_step must be a step count >= 0, got {step!r}")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        raise ValueError(f"checkpoint {folder} is incomplete: no model .safetensors file")
    names = set()
    for path in weights:
        try:
            # opening checks the header and that the data covers the file, so a truncated copy fails here
            with safe_open(str(path), framework="pt") as handle:
                if path.name.startswith("model"):  # not a PEFT adapter's file
                    names.update(handle.keys())
        except Exception as err:  # safetensors raises its own error types for a bad header or length
            raise ValueError(f"checkpoint file {path} is corrupt or truncated: {err}") from err
    if model_type is not None and names:
        _check_checkpoint_model(folder, model_type, names)
    for name in ("optimizer.pt", "scheduler.pt"):
        path = folder / name
        if not path.is_file() or path.stat().st_size == 0:
            raise ValueError(f"checkpoint {folder} is incomplete: {name} is missing or empty")
    for path in sorted(folder.glob("*.pt")) + sorted(folder.glob("*.pth")):
        _check_torch_archive(path)


def _check_checkpoint_model(folder: Path, model_type: str, names: set[str]) -> None:
    """The checkpoint's config is of the run's family, and its weights hold exactly the tensors of the model its
    config describes (listed from a model built on the meta device: no memory, no initialisation)."""
    import torch
    import transformers
    from huggingface_hub.errors import StrictDataclassError

    from plldr_hf.models import FAMILIES

    try:
        config = transformers.AutoConfig.from_pretrained(folder)
    except (OSError, ValueError, StrictDataclassError) as err:
        raise ValueError(f"checkpoint {folder}: its config.json cannot be read ({err})") from err
    if config.model_type != model_type:
        raise ValueError(
            f"checkpoint {folder} holds a {config.model_type!r} model; this run trains {FAMILIES[model_type].description}"
        )
    with torch.device("meta"):
        model = getattr(transformers, FAMILIES[model_type].auto_class).from_config(config)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - names - _tied_names(model)), sorted(names - expected)
    if missing or unexpected:
        shown = (missing + unexpected)[:3]
        raise ValueError(
            f"checkpoint {folder}: its weights are not this model's ({len(missing)} tensor(s) missing, "
            f"{len(unexpected)} unexpected, e.g. {', '.join(shown)}); resume from a checkpoint of this run"
        )


def _tied_names(model) -> set[str]:
    # full names of the tensors save_pretrained leaves out because they share another's storage (tied embeddings)
    return set(getattr(model, "all_tied_weights_keys", None) or {})


def _check_torch_archive(path: Path) -> None:
    """`torch.save` writes a zip archive; a truncated or damaged one has no readable central directory or fails
    its CRC check. Checked without unpickling anything (torch would fail later with `PytorchStreamReader failed`)."""
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (OSError, zipfile.BadZipFile, EOFError) as err:
        raise ValueError(f"checkpoint file {path} is corrupt or truncated: {err}") from err
    if damaged is not None:
        raise ValueError(f"checkpoint file {path} is corrupt: entry {damaged} fails its CRC check")
    import torch

    # what unpickling would import, read without unpickling: Trainer's files need nothing beyond tensors and, for the
    # random-number state, numpy arrays (which Trainer allows); anything else would be refused by its weights-only load
    # with a traceback, or was written to run code
    try:
        needed = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except Exception as err:  # a pickle it cannot scan
        raise ValueError(f"checkpoint file {path} is not a readable torch archive ({err})") from err
    foreign = [name for name in needed if name not in _NUMPY_GLOBALS and not name.startswith("numpy.dtypes.")]
    if foreign:
        raise ValueError(
            f"checkpoint file {path} refers to {', '.join(foreign[:3])}, which a weights-only load refuses: it was "
            "not written by Trainer (or was changed since); resume from another checkpoint"
        )


# the numpy names in Trainer's `rng_state.pth`, which its weights-only load allows
_NUMPY_GLOBALS = (
    "numpy.ndarray",
    "numpy.dtype",
    "numpy.core.multiarray._reconstruct",
    "numpy._core.multiarray._reconstruct",
)


# what a run read, kept beside its checkpoints so that a resume over other data is named (`check_data_unchanged`)
FINGERPRINT_FILE = "data_fingerprint.json"
# the options that decide which documents a run reads and how, beside the files themselves
_DATA_OPTIONS = (
    "dataset", "dataset_config", "text_column", "streaming", "max_train_documents", "tokenizer_sample_documents",
    "wmt17_dir", "source_lang", "target_lang", "max_train_samples",
)  # fmt: skip


# the options a resumed run must share with the run it continues (the model it builds and how it reads its data)
_RUN_OPTIONS = (
    "size",
    "architecture",
    "block_size",
    "vocab_size",
    "dag_form",
    "streaming",
    "position_encoding",
    "pcmv",
)


def data_fingerprint(options) -> dict:
    """The data a run reads: its data options, and each local file behind `options.dataset` (files, folders and
    globs; `SPLIT=PATH` entries by their path) with its size and modification time. A Hub dataset is known by its
    name and settings only."""
    import glob

    files = {}
    for spec in getattr(options, "dataset", None) or []:
        split, sep, rest = str(spec).partition("=")
        path_text = rest if sep and split.isidentifier() and not Path(spec).exists() else str(spec)
        expanded = str(Path(path_text).expanduser())
        matches = sorted(glob.glob(expanded)) if glob.has_magic(expanded) else [expanded]
        for match in map(Path, matches):
            members = sorted(p for p in match.rglob("*") if p.is_file()) if match.is_dir() else [match]
            for member in members:
                if member.is_file():
                    stat = member.stat()
                    files[str(member.resolve())] = [stat.st_size, stat.st_mtime_ns]
    settings = {name: getattr(options, name) for name in _DATA_OPTIONS if hasattr(options, name)}
    run = {name: getattr(options, name) for name in _RUN_OPTIONS if hasattr(options, name)}
    return json.loads(json.dumps({"options": settings, "files": files, "run": run}, default=str))


def _differences(saved: dict, current: dict) -> list[str]:
    found = []
    for name in sorted(set(saved.get("options", {})) | set(current["options"])):
        before, now = saved.get("options", {}).get(name), current["options"].get(name)
        if before != now:
            found.append(f"{name} was {before!r}, now {now!r}")
    before, now = saved.get("files", {}), current["files"]
    found += [f"{path} added" for path in sorted(set(now) - set(before))]
    found += [f"{path} removed" for path in sorted(set(before) - set(now))]
    found += [
        f"{path} rewritten (size or time changed)"
        for path in sorted(set(now) & set(before))
        if now[path] != before[path]
    ]
    return found


def check_data_unchanged(output_dir, options, resuming: bool, is_main: bool = True) -> None:
    """A fresh run records its settings and data fingerprint in `output_dir`; a resumed one refuses other settings
    (`_RUN_OPTIONS`) and other data, naming each difference, unless `options.allow_data_change` (then it warns about
    the data and records the new one)."""
    path = Path(output_dir) / FINGERPRINT_FILE
    current = data_fingerprint(options)
    if resuming and path.is_file():
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as err:
            raise ValueError(f"--resume: {path} cannot be read ({err}); its data cannot be compared") from None
        saved = saved if isinstance(saved, dict) else {}
        before = saved.get("run") if isinstance(saved.get("run"), dict) else {}
        for key, value in current["run"].items():
            if key in before and before[key] != value:
                raise ValueError(
                    f"--resume: {key}={value!r} differs from the run being resumed ({before[key]!r} in {path})"
                )
        found = _differences(saved, current)
        if found and not getattr(options, "allow_data_change", False):
            shown = "; ".join(found[:4]) + (f"; and {len(found) - 4} more" if len(found) > 4 else "")
            raise ValueError(
                f"--resume: the data differs from what the run was trained on ({shown}); resume over it with "
                "--allow-data-change if that is intended, or restore the data"
            )
        if not found:
            return
        logger.warning("resuming over changed data (--allow-data-change): %s", "; ".join(found[:4]))
    if is_main:
        staging = path.with_name(f".{FINGERPRINT_FILE}.{os.getpid()}")
        staging.write_text(json.dumps(current, indent=1) + "\n")
        staging.replace(path)
