"""Saved folder (or Hub repo id) → model + tokenizer, the one loader every command, the Hub push and the plots use.

The model is built with this package's registered classes (never remote code), as the Auto class its family's
descriptor names (`plldr_hf.models.FAMILIES`: `pldrllm` → `AutoModelForCausalLM`, `agf` → `AutoModelForSeq2SeqLM`).
Mistakes get an error that names the folder
and the fix (no folder, no `config.json`, a model of the other family, no tokenizer).
"""

from __future__ import annotations

import json
import os
from pathlib import Path


__all__ = ["WeightsMismatchError", "load_folder", "load_model", "load_tokenizer", "read_texts"]


class WeightsMismatchError(RuntimeError):
    """The weights file of a saved folder does not hold exactly the model's tensors: transformers would fill the
    missing ones with a fresh random initialisation and every number computed from the model would be meaningless.
    Not a `ValueError`: the command line reports it with exit status 1, not as a usage mistake."""


def _is_hub_id(name: str) -> bool:
    # `org/name` or `name` that is not an existing path and not written as one: a Hub repo (or its local cache)
    return not Path(name).exists() and not name.startswith((".", "/", "~")) and name.count("/") <= 1


def _model_type(folder: Path) -> str:
    if _is_hub_id(str(folder)):
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(folder)).model_type
    if not folder.is_dir():
        raise FileNotFoundError(f"model directory not found: {folder}")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"no config.json in {folder}: not a saved model directory")
    return json.loads(config_file.read_text()).get("model_type")


def load_model(
    model_dir: str | os.PathLike, *, model_type: str | None = None, dtype="auto", allow_mismatched_weights=False
):
    """The model saved in `model_dir`, in eval mode. `model_type` (`"pldrllm"` / `"agf"`) is what the caller needs:
    a folder of another family is refused with the names of both. `dtype`: a torch dtype or `"auto"` (the
    checkpoint's own). Missing, unexpected or wrongly shaped tensors raise `WeightsMismatchError` naming them,
    unless `allow_mismatched_weights` (then transformers initialises the missing ones at random)."""
    import transformers

    from plldr_hf.models import FAMILIES

    folder = Path(model_dir)
    found = _model_type(folder)
    if model_type is not None and found != model_type:
        raise ValueError(f"{folder} holds a {found!r} model; this command needs {FAMILIES[model_type].description}")
    if found not in FAMILIES:
        raise ValueError(f"{folder} holds a {found!r} model; plldr_hf loads {sorted(FAMILIES)}")
    auto = getattr(transformers, FAMILIES[found].auto_class)
    model, info = auto.from_pretrained(folder, dtype=dtype, output_loading_info=True)
    problems = []
    for key, label in (
        ("missing_keys", "missing"),
        ("unexpected_keys", "unexpected"),
        ("mismatched_keys", "of another shape"),
    ):
        names = sorted(str(entry[0] if isinstance(entry, tuple) else entry) for entry in info.get(key) or ())
        if names:
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            problems.append(f"{len(names)} tensor(s) {label}: {shown}")
    if problems and not allow_mismatched_weights:
        raise WeightsMismatchError(
            f"{folder}: the saved weights do not match the model ({'; '.join(problems)}), so those tensors would be "
            "random; re-save the model from its training run (save_pretrained), or load it with "
            "plldr_hf.loading.load_model(..., allow_mismatched_weights=True) to inspect it"
        )
    return model.eval()


def load_tokenizer(path: str | os.PathLike):
    """`AutoTokenizer` from a local folder, with a clear error when it has no tokenizer files."""
    from transformers import AutoTokenizer

    import plldr_hf  # noqa: F401  (routes released PLDR-LLM folders to the exact unigram tokenizer)

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"could not load a tokenizer from {path} (pass --tokenizer): {error}") from error


def load_folder(model_dir: str | os.PathLike, *, model_type: str | None = None, dtype="auto"):
    """(model, tokenizer or None) from a saved folder: the tokenizer when the folder has tokenizer files."""
    folder = Path(model_dir)
    model = load_model(folder, model_type=model_type, dtype=dtype)
    tokenizer = None
    if (
        _is_hub_id(str(folder))
        or (folder / "tokenizer_config.json").is_file()
        or (folder / "tokenizer.json").is_file()
    ):
        tokenizer = load_tokenizer(folder)
    return model, tokenizer


def read_texts(path: str | os.PathLike) -> list[str]:
    """Non-empty lines of a UTF-8 text file, one text each."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"texts file not found: {path}")
    texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise ValueError(f"texts file {path} has no non-empty line")
    return texts
