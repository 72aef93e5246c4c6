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


__all__ = [
    "DamagedWeightsError",
    "ModelFolderError",
    "WeightsMismatchError",
    "load_folder",
    "load_model",
    "load_tokenizer",
    "read_config",
    "read_texts",
]

# files a saved tokenizer may consist of (fast, SentencePiece, or a vocabulary-file tokenizer)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "spiece.model", "vocab.json")


class ModelFolderError(ValueError):
    """A model folder that cannot be used as it is (missing, not a saved model, a damaged or malformed file, a
    config value out of range, no tokenizer); the message names the folder or file and the fix. The command
    line prints it as one line with exit status 2 (`exit_status`)."""

    exit_status = 2


class DamagedWeightsError(RuntimeError):
    """Weights that load but cannot be a trained model's: integer tensors where the model computes in floating point
    (a file written by something else than `save_pretrained` or a quantizer), or NaN / infinite values (a run that
    diverged, or a damaged file). Reported with exit status 1, like `WeightsMismatchError`."""

    exit_status = 1


class WeightsMismatchError(RuntimeError):
    """The weights file of a saved folder does not hold exactly the model's tensors: transformers would fill the
    missing ones with a fresh random initialisation and every number computed from the model would be meaningless.
    Not a `ValueError`: the command line reports it with exit status 1, not as a usage mistake."""

    exit_status = 1


def is_hub_id(name: str) -> bool:
    # `org/name` or `name` that is not an existing path and not written as one: a Hub repo (or its local cache)
    return not Path(name).exists() and not name.startswith((".", "/", "~")) and name.count("/") <= 1


def read_config(model_dir: str | os.PathLike) -> dict:
    """The saved `config.json` of a local folder or Hub repo id, as a dict; `ModelFolderError` naming the folder
    when there is none (a path that does not exist, a folder that is not a saved model, a Hub id that cannot be
    reached) or it is not valid JSON."""
    folder = Path(model_dir)
    if is_hub_id(str(model_dir)):
        from transformers import PretrainedConfig

        try:
            return PretrainedConfig.get_config_dict(str(model_dir))[0]
        except (OSError, ValueError) as error:
            raise ModelFolderError(
                f"{model_dir} is not a local folder, and no Hub model of that name can be reached (offline?): give "
                f"the path of a saved model folder ({' '.join(str(error).split())[:160]})"
            ) from error
    if folder.is_file():
        raise ModelFolderError(f"{folder} is a file, not a model folder; give the folder written by save_pretrained")
    if not folder.is_dir():
        raise ModelFolderError(f"model folder {folder} does not exist; give the folder written by save_pretrained")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ModelFolderError(f"no config.json in {folder}: not a saved model folder")
    try:
        config = json.loads(config_file.read_text())
    except RecursionError:
        raise ModelFolderError(f"{config_file} is nested too deeply to be a model config; re-save the model") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ModelFolderError(f"{config_file} is not valid JSON ({error}); re-save the model") from error
    if not isinstance(config, dict):
        raise ModelFolderError(f"{config_file} holds no JSON object; re-save the model")
    return config


def _check_weight_files(folder: Path) -> None:
    """A clear error for a folder without weights or with a damaged weights file, before transformers reads it."""
    if not folder.is_dir():
        return  # a Hub id: transformers downloads (or finds in the cache) and checks the files itself
    weights = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("pytorch_model*.bin"))
    if not weights:
        raise ModelFolderError(f"no weights file (model.safetensors) in {folder}; re-save the model with its weights")
    from safetensors import safe_open

    for path in weights:
        if path.suffix != ".safetensors":
            continue
        try:
            with safe_open(str(path), framework="pt"):  # checks the header and that the data covers the file
                pass
        except Exception as error:  # safetensors raises its own error types
            raise ModelFolderError(
                f"{path} is corrupt or truncated ({error}); copy it again or re-save the model"
            ) from error


def _stored_dtypes(folder: Path) -> dict[str, str]:
    """Tensor name → dtype as stored (safetensors' names: F32, BF16, I8, BOOL, ...) in a local folder's weights."""
    from safetensors import safe_open

    stored = {}
    for path in sorted(folder.glob("*.safetensors")) if folder.is_dir() else ():
        with safe_open(str(path), framework="pt") as handle:
            stored.update({name: handle.get_slice(name).get_dtype() for name in handle.keys()})
    return stored


def _name_tensors(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def check_weight_values(model, folder: str | os.PathLike, stored: dict[str, str] | None = None) -> None:
    """`DamagedWeightsError` when a loaded model's weights cannot be right: a floating-point tensor of the model that
    the file stores as integers (transformers would cast int8 codes to floats silently; a quantized checkpoint names
    its `quantization_config` and is not checked here), or any NaN / infinite value. A float stored in another float
    dtype than the rest of the file is cast, and a warning says so."""
    import warnings

    import torch

    stored = _stored_dtypes(Path(folder)) if stored is None else stored
    quantized = getattr(model.config, "quantization_config", None) is not None
    integers, floats, non_finite = [], {}, []
    for name, tensor in model.state_dict().items():
        if not tensor.is_floating_point():
            continue
        kind = stored.get(name)
        if kind is not None and not kind.startswith(("F", "BF")) and not quantized:
            integers.append(f"{name} ({kind})")
        elif kind is not None:
            floats.setdefault(kind, []).append(name)
        if tensor.device.type != "meta" and not torch.isfinite(tensor).all():
            non_finite.append(name)
    if integers:
        raise DamagedWeightsError(
            f"{folder}: {len(integers)} floating-point tensor(s) are stored as integers ({_name_tensors(integers)}), so "
            "the weights would be integer codes read as numbers; re-save the model with save_pretrained, or quantize it "
            "through a transformers quantization_config"
        )
    if non_finite:
        raise DamagedWeightsError(
            f"{folder}: {len(non_finite)} tensor(s) hold NaN or infinite values ({_name_tensors(non_finite)}): the "
            "training run diverged or the file is damaged; use an earlier checkpoint"
        )
    if len(floats) > 1:  # a file of mixed float dtypes: the minority was cast to the model's dtype
        common = max(floats, key=lambda kind: len(floats[kind]))
        cast = [f"{name} ({kind})" for kind, names in floats.items() if kind != common for name in names]
        warnings.warn(
            f"{folder}: {len(cast)} tensor(s) are stored in another dtype than the rest ({_name_tensors(cast)}); "
            f"they were cast to {next(iter(model.parameters())).dtype}",
            stacklevel=3,
        )


def load_model(
    model_dir: str | os.PathLike, *, model_type: str | None = None, dtype="auto", allow_mismatched_weights=False
):
    """The model saved in `model_dir`, in eval mode. `model_type` (`"pldrllm"` / `"agf"`) is what the caller needs:
    a folder of another family is refused with the names of both. `dtype`: a torch dtype or `"auto"` (the
    checkpoint's own). Missing, unexpected or wrongly shaped tensors raise `WeightsMismatchError` naming them,
    unless `allow_mismatched_weights` (then transformers initialises the missing ones at random); integer-coded or
    non-finite weights raise `DamagedWeightsError` (`check_weight_values`)."""
    import transformers
    from huggingface_hub.errors import StrictDataclassError

    from plldr_hf.models import FAMILIES

    folder = Path(model_dir)
    found = read_config(folder).get("model_type")
    if model_type is not None and found != model_type:
        raise ModelFolderError(
            f"{folder} holds a {found!r} model; this command needs {FAMILIES[model_type].description}"
        )
    if found not in FAMILIES:
        raise ModelFolderError(f"{folder} holds a {found!r} model; plldr_hf loads {sorted(FAMILIES)}")
    auto = getattr(transformers, FAMILIES[found].auto_class)
    _check_weight_files(folder)
    try:
        # tensors of another shape are reported below with their names (transformers would raise a RuntimeError
        # about `ignore_mismatched_sizes` instead)
        model, info = auto.from_pretrained(folder, dtype=dtype, output_loading_info=True, ignore_mismatched_sizes=True)
    except (OSError, ValueError, TypeError, StrictDataclassError) as error:
        # a config value the family's checks refuse (named in the message), or a file transformers cannot read
        raise ModelFolderError(f"{folder}: {' '.join(str(error).split())}") from error
    problems = []
    for key, label in (
        ("missing_keys", "missing"),
        ("unexpected_keys", "unexpected"),
        ("mismatched_keys", "of another shape"),
    ):
        names = sorted(str(entry[0] if isinstance(entry, tuple) else entry) for entry in info.get(key) or ())
        if names:
            problems.append(f"{len(names)} tensor(s) {label}: {_name_tensors(names)}")
    if problems and not allow_mismatched_weights:
        raise WeightsMismatchError(
            f"{folder}: the saved weights do not match the model ({'; '.join(problems)}), so those tensors would be "
            "random; re-save the model from its training run (save_pretrained), or load it with "
            "plldr_hf.loading.load_model(..., allow_mismatched_weights=True) to inspect it"
        )
    check_weight_values(model, folder)
    return model.eval()


def load_tokenizer(path: str | os.PathLike, *, model_config=None):
    """`AutoTokenizer` from a local folder, with a clear error when it has no tokenizer files. With `model_config`
    (the config of the model it will feed), a tokenizer of another model is refused: one saved beside a model of
    another family, or one whose ids reach past the model's vocabulary."""
    from transformers import AutoTokenizer

    import plldr_hf.models  # noqa: F401  (routes released PLDR-LLM folders to the exact unigram tokenizer)

    folder = Path(path)
    if folder.is_file():
        raise ModelFolderError(f"{folder} is a file; a tokenizer is a folder (tokenizer.json, tokenizer_config.json)")
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelFolderError(
            f"no tokenizer in {folder} (none of {', '.join(TOKENIZER_FILES[:3])}); save the tokenizer into the "
            "folder (tokenizer.save_pretrained) or pass --tokenizer"
        )
    if not folder.exists() and str(path).startswith((".", "/", "~")):
        raise ModelFolderError(f"tokenizer folder {path} does not exist; pass an existing --tokenizer")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except RecursionError:
        raise ModelFolderError(
            f"a tokenizer file in {path} is nested too deeply to read (a damaged tokenizer_config.json?); re-save "
            "the tokenizer or pass --tokenizer"
        ) from None
    except (OSError, ValueError, TypeError) as error:
        raise ModelFolderError(f"could not load a tokenizer from {path} (pass --tokenizer): {error}") from error
    if model_config is not None:
        beside = read_config(folder).get("model_type") if (folder / "config.json").is_file() else None
        if beside is not None and beside != model_config.model_type:
            raise ModelFolderError(
                f"the tokenizer in {path} belongs to a {beside!r} model, not to this {model_config.model_type!r} "
                "model; pass the tokenizer the model was trained with"
            )
        if len(tokenizer) > model_config.vocab_size:
            raise ModelFolderError(
                f"the tokenizer in {path} has {len(tokenizer):,} tokens, more than the model's vocab_size "
                f"{model_config.vocab_size:,}: it is another model's; pass the tokenizer the model was trained with"
            )
    return tokenizer


def load_folder(model_dir: str | os.PathLike, *, model_type: str | None = None, dtype="auto"):
    """(model, tokenizer or None) from a saved folder: the tokenizer when the folder has tokenizer files."""
    folder = Path(model_dir)
    model = load_model(folder, model_type=model_type, dtype=dtype)
    tokenizer = None
    if is_hub_id(str(folder)) or any((folder / name).is_file() for name in TOKENIZER_FILES):
        tokenizer = load_tokenizer(folder, model_config=model.config)
    return model, tokenizer


def read_texts(path: str | os.PathLike) -> list[str]:
    """Non-empty lines of a UTF-8 text file, one text each."""
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"{path} is a folder; give a text file with one text per line")
    if not path.is_file():
        raise FileNotFoundError(f"texts file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"texts file {path} is not UTF-8 text (byte {error.start}: {error.reason}); save it as UTF-8, e.g. with "
            f"iconv -f latin1 -t utf-8"
        ) from None
    texts = [line.strip() for line in text.splitlines() if line.strip()]
    if not texts:
        raise ValueError(f"texts file {path} has no non-empty line")
    return texts
