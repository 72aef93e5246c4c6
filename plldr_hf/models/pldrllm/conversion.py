"""Bring the reference PLDR-LLM code's files into the released Hugging Face format (github.com/burcgokden/PLDR-LLM-with-KVG-cache).

- `convert_pth`: a `.pth` saved by the reference PyTorch code (`{"model_state_dict", "optimizer_state_dict",
  "loss", "accuracy"}`, loaded with `weights_only=True`) → a released-format folder (config.json, model.safetensors,
  generation_config.json, tokenizer when given). The state-dict keys already are the released names; every
  size is read off the tensor shapes, only `max_position_embeddings` (the RoPE table length) and the RoPE convention
  are not in the file.
- `load_predefined_g`: the reference ablations' `predefined_G_LM_cache_list_*.pkl` (a plain pickle of CUDA tensors)
  through a restricted unpickler: only the tensor-rebuild globals are allowed, every storage is read with
  `torch.load(weights_only=True)` and mapped to the CPU, and a file naming any other global is refused before
  anything in it runs.
"""

from __future__ import annotations

import collections
import errno
import io
import os
import pickle
import pickletools
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import torch


__all__ = ["convert_pth", "config_from_state_dict", "load_predefined_g"]

# the globals a pickle of plain tensors needs (protocol 2–5, `torch.save` of a list through `pickle.dump`)
_ALLOWED_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch.storage", "_load_from_bytes"),
    ("collections", "OrderedDict"),
    ("_codecs", "encode"),  # protocol 2 stores bytes as _codecs.encode(text, "latin1"); replaced by a bytes-only one
}
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}


def _globals_named(data: bytes) -> list[tuple[str, str]]:
    """Every (module, name) the pickle would import, read from its opcodes without running anything."""
    found, strings = [], []
    for op, arg, _ in pickletools.genops(data):
        if op.name in _STRING_OPS:
            strings.append(arg)
        elif op.name in ("GLOBAL", "INST"):
            module, name = arg.split(" ", 1)
            found.append((module, name))
        elif op.name == "STACK_GLOBAL":
            # the module and the name are the last two strings pushed (memo ops in between do not push strings)
            found.append((strings[-2], strings[-1]) if len(strings) >= 2 else ("?", "?"))
    return found


def _storage_from_bytes(data: bytes):
    # `torch.storage._load_from_bytes` would call torch.load with weights_only=False on these bytes
    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


def _latin1_bytes(text, encoding="latin1"):
    # the only use of `_codecs.encode` in a tensor pickle: protocol 2's spelling of a bytes object
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is allowed only as protocol 2's latin1 bytes")
    return text.encode("latin1")


class _TensorUnpickler(pickle.Unpickler):
    """Unpickles plain tensors only; every tensor must lie inside its own stored bytes, and all tensors together
    may hold at most `budget` bytes (bounded by the file's size), so a small file can never ask for a large
    allocation (a zero-stride view of a tiny storage would become gigabytes once copied)."""

    def __init__(self, file, budget: int):
        super().__init__(file)
        self.budget = budget

    def _rebuild(self, storage, offset, size, stride, *rest):
        size, stride = tuple(size), tuple(stride)
        numel = 1
        for extent in size:
            numel *= int(extent)
        with warnings.catch_warnings():  # the legacy TypedStorage that tensor pickles hold warns on every use
            warnings.simplefilter("ignore")
            itemsize, elements, stored = storage.element_size(), storage.size(), storage.nbytes()
        reach = int(offset) + sum((int(n) - 1) * int(s) for n, s in zip(size, stride) if n > 0) + 1 if numel else 0
        if any(int(s) < 0 for s in stride) or reach > elements or numel * itemsize > stored:
            raise pickle.UnpicklingError("a tensor in the file reaches past or repeats its own stored data")
        self.budget -= numel * 4  # float32 after conversion
        if self.budget < 0:
            raise pickle.UnpicklingError("the file's tensors hold more data than the file itself stores")
        return torch._utils._rebuild_tensor_v2(storage, offset, size, stride, *rest)

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return self._rebuild
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return _storage_from_bytes
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("_codecs", "encode"):
            return _latin1_bytes
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a predefined-G file")


def load_predefined_g(path: str | os.PathLike) -> torch.Tensor:
    """G_LM of every layer from a reference predefined-G pickle: float32 CPU tensor (num_layers, num_heads, d, d).

    The file holds one (1, H, d, d) tensor per layer (or an [A_LM, G_LM] pair per layer; G_LM is taken). Raises
    `pickle.UnpicklingError` when the file names any global other than the tensor-rebuild ones, before any of it
    runs, and `ValueError` for a file of the wrong structure.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"predefined-G file not found: {path}")
    data = path.read_bytes()
    try:
        named = _globals_named(data)
    except Exception as err:
        raise pickle.UnpicklingError(f"{path} is not a readable pickle ({err})") from err
    refused = sorted({f"{m}.{n}" for m, n in named if (m, n) not in _ALLOWED_GLOBALS})
    if refused:
        raise pickle.UnpicklingError(
            f"{path} names globals that a predefined-G file never needs: {', '.join(refused)}; refusing to load it"
        )
    # float32 copies of what the file stores: at most 4 bytes per stored byte (a float16 or int8 file grows)
    value = _TensorUnpickler(io.BytesIO(data), budget=4 * len(data)).load()
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{path}: expected a list of per-layer G tensors, got {type(value).__name__}")
    layers = []
    for i, entry in enumerate(value):
        if isinstance(entry, (list, tuple)):
            entry = entry[-1]
        if not isinstance(entry, torch.Tensor) or entry.dim() not in (3, 4):
            raise ValueError(f"{path}: layer {i} is not a (1, H, d, d) tensor")
        g = entry.detach().float().cpu()
        layers.append(g[0] if g.dim() == 4 else g)
    shapes = {tuple(g.shape) for g in layers}
    if len(shapes) != 1 or layers[0].shape[-1] != layers[0].shape[-2]:
        raise ValueError(f"{path}: per-layer G shapes differ or are not square: {sorted(shapes)}")
    return torch.stack(layers)


def _count(keys, pattern: str) -> int:
    indices = {int(m.group(1)) for k in keys if (m := re.match(pattern, k))}
    if indices and indices != set(range(len(indices))):
        raise ValueError(f"the checkpoint's {pattern!r} indices are not contiguous: {sorted(indices)}")
    return len(indices)


def config_from_state_dict(
    state: dict, *, max_position_embeddings: int = 1024, reference_rope: bool = True, num_heads: int | None = None
):
    """A `PldrllmConfig` whose sizes are read off the tensor shapes of a released-key state dict."""
    from plldr_hf.models.pldrllm.configuration_pldrllm import PldrllmConfig

    required = [
        "decoder.embedding.weight",
        "decoder.dec_layers.0.mha1.wq.weight",
        "decoder.dec_layers.0.ffn.gluw1.weight",
        "final_layer.weight",
    ]
    missing = [k for k in required if k not in state]
    if missing:
        raise ValueError(
            f"not a PLDR-LLM state dict: missing {', '.join(missing)} (expected the released key names, "
            "e.g. from the reference code's `model_state_dict`)"
        )
    vocab_size, hidden = state["decoder.embedding.weight"].shape
    keys = list(state)
    layers = _count(keys, r"decoder\.dec_layers\.(\d+)\.")
    learned = "decoder.dec_layers.0.mha1.plgatt_layer.Wlst" in state
    fields = {}
    if learned:
        heads, head_dim, _ = state["decoder.dec_layers.0.mha1.plgatt_layer.Wlst"].shape
        unit = "decoder.dec_layers.0.mha1.reslayerAs.0.denseAs.0.gluw1"
        if f"{unit}.weight" not in state:
            raise ValueError("the checkpoint has PLGA tensors but no metric learner (`reslayerAs`): it is incomplete")
        fields["A_dff"] = state[f"{unit}.weight"].shape[0]
        fields["num_reslayerA"] = _count(keys, r"decoder\.dec_layers\.0\.mha1\.reslayerAs\.(\d+)\.")
        fields["num_denseA"] = _count(keys, r"decoder\.dec_layers\.0\.mha1\.reslayerAs\.0\.denseAs\.(\d+)\.")
        fields["glu_bias"] = f"{unit}.bias" in state
    else:
        if num_heads is None:
            raise ValueError(
                "the checkpoint has no PLGA tensors (a fixed-G v510G model): the number of heads is not in its "
                "shapes; pass --predefined-g FILE (its G gives heads and head size)"
            )
        heads, head_dim = num_heads, hidden // num_heads
        fields["custom_G_type"] = "external"
    if heads * head_dim != hidden:
        raise ValueError(f"heads × head size = {heads} × {head_dim} does not equal the width {hidden}")
    return PldrllmConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        head_dim=head_dim,
        intermediate_size=state["decoder.dec_layers.0.ffn.gluw1.weight"].shape[0],
        attention_bias="decoder.dec_layers.0.mha1.wq.bias" in state,
        final_bias="final_layer.bias" in state,
        max_position_embeddings=max_position_embeddings,
        reference_rope=reference_rope,
        **fields,
    )


def _read_pth(path: Path) -> dict:
    if not path.is_file():
        found = "is a folder, not a .pth file" if path.is_dir() else "not found"
        raise FileNotFoundError(f"checkpoint {path} {found}")
    try:
        checkpoint = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"{path} holds objects other than tensors and plain containers, so it is not loaded (weights_only=True): "
            f"{str(err).splitlines()[0]}"
        ) from err
    except Exception as err:
        raise ValueError(f"{path} is not a readable PyTorch checkpoint (truncated or corrupt?): {err}") from err
    if isinstance(checkpoint, dict) and "model_state_dict" in checkpoint:
        checkpoint = checkpoint["model_state_dict"]
    if not isinstance(checkpoint, dict) or not all(isinstance(v, torch.Tensor) for v in checkpoint.values()):
        raise ValueError(
            f"{path}: expected the reference code's checkpoint {{'model_state_dict': ...}} or a state dict of tensors"
        )
    return checkpoint


def convert_pth(
    pth: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    max_position_embeddings: int | None = None,
    reference_rope: bool = True,
    tokenizer: str | os.PathLike | None = None,
    predefined_g: str | os.PathLike | None = None,
):
    """Convert a reference `.pth` into a released-format folder; returns the loaded `PldrllmForCausalLM`.

    With `predefined_g`, the model is written in the fixed-G format (`custom_G_type="external"`, G_LM in
    `decoder.past_G_values`) without the metric learner. The folder is assembled in a temporary sibling and moved
    into place at the end, so nothing is written when anything fails; an existing non-empty `output_dir` is refused.

    `max_position_embeddings` (the RoPE table length, the reference training script's `max_seq_len`) is not stored in
    a `.pth` and must be given: a wrong guess would silently change the positions the model accepts.
    """
    from transformers import GenerationConfig

    from plldr_hf.models.pldrllm.modeling_pldrllm import PldrllmForCausalLM

    pth, output_dir = Path(pth), Path(output_dir)
    if max_position_embeddings is None:
        raise ValueError(
            "a reference .pth does not store max_position_embeddings (the RoPE table length, the training script's "
            "max_seq_len); give it (--max-position-embeddings N; the released 110M models use 1024)"
        )
    if output_dir.exists() and any(output_dir.iterdir()):
        raise FileExistsError(f"{output_dir} exists and is not empty; choose a new output folder")
    state = _read_pth(pth)
    g = load_predefined_g(predefined_g) if predefined_g is not None else None
    config = config_from_state_dict(
        state,
        max_position_embeddings=max_position_embeddings,
        reference_rope=reference_rope,
        num_heads=None if g is None else g.shape[1],
    )
    if g is not None:
        if g.shape != (config.num_hidden_layers, config.num_attention_heads, config.head_dim, config.head_dim):
            raise ValueError(
                f"{predefined_g}: G of shape {tuple(g.shape)} does not fit the checkpoint (layers "
                f"{config.num_hidden_layers}, heads {config.num_attention_heads}, head size {config.head_dim})"
            )
        config.custom_G_type = "external"
        for key in [
            k for k in state if ".mha1.plgatt_layer." in k or ".mha1.reslayerAs." in k or ".mha1.layernorm1." in k
        ]:
            del state[key]
    with torch.device("meta"):
        model = PldrllmForCausalLM(config)
    expected = set(model.state_dict())
    if g is not None:
        fixed = torch.zeros(model.decoder.past_G_values.shape)
        fixed[:, 1] = torch.eye(config.head_dim)
        fixed[:, 2, 0] = g
        state = {
            **state,
            "decoder.past_G_values": fixed,
            "decoder.past_G_values_status": torch.ones(config.num_hidden_layers, dtype=torch.bool),
        }
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise ValueError(
            f"{pth} does not match the PLDR-LLM layout read off its shapes: missing {missing[:8]}"
            f"{' …' if len(missing) > 8 else ''}, unexpected {unexpected[:8]}{' …' if len(unexpected) > 8 else ''}"
        )
    shapes = model.state_dict()
    wrong = [k for k in expected if tuple(state[k].shape) != tuple(shapes[k].shape)]
    if wrong:
        raise ValueError(f"{pth}: tensor shapes do not fit one model: {', '.join(sorted(wrong)[:8])}")
    model.load_state_dict(
        {k: v.float() if v.is_floating_point() else v for k, v in state.items()}, strict=True, assign=True
    )
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    )
    tok = None
    if tokenizer is not None:
        from plldr_hf.models.pldrllm.tokenization_pldrllm import PldrllmTokenizer

        tokenizer = Path(tokenizer)
        if not tokenizer.is_file():
            found = "is a folder, not a SentencePiece .model file" if tokenizer.is_dir() else "not found"
            raise FileNotFoundError(f"tokenizer model {tokenizer} {found}")
        tok = PldrllmTokenizer(vocab_file=str(tokenizer), model_max_length=max_position_embeddings)
        if len(tok) > config.vocab_size:
            raise ValueError(
                f"{tokenizer} has {len(tok)} pieces but the checkpoint's vocabulary has {config.vocab_size}: "
                "not this model's tokenizer (the released tokenizer.model, 32,000 pieces, belongs to the released "
                "110M models; give the SentencePiece model this checkpoint was trained with)"
            )
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        model.save_pretrained(staging)
        if tok is not None:
            tok.save_pretrained(staging)
        try:
            if output_dir.exists():
                output_dir.rmdir()
            os.replace(staging, output_dir)
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # another conversion filled the folder meanwhile (two runs started together): theirs stays whole
            raise FileExistsError(
                f"{output_dir} was filled by something else meanwhile; nothing was replaced"
            ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return model.eval()
