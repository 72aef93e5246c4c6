"""What one call of a PLDR-LLM may be given, checked before any work: token ids, embeddings, masks and positions of
the right shape, type and range, labels inside the vocabulary, and DAG weights that are finite and non-negative.
Each check names the argument and the fix instead of failing deep inside (an index error, a shape mismatch in a
LayerNorm) or silently (a NaN loss, a RoPE table read from its end). The first three are marked copies of the AGF
family's (this folder is remote code and may import only torch, transformers and itself).
"""

from __future__ import annotations

import math

import torch
from torch import nn


# Copied from plldr_hf.models.agf.modeling_agf.check_inputs
def check_inputs(
    owner: str, input_ids, inputs_embeds, attention_mask, vocab_size: int, past_length: int = 0, hidden_size=None
) -> None:
    """Clear errors for inputs that would fail deep inside or silently: inputs of the wrong rank, width or dtype,
    empty inputs, token ids outside the vocabulary, an attention mask of the wrong shape. Ids are checked here only
    when no cache is filled yet (the decode steps feed back the model's own predictions; a check there would cost a
    device sync per token): a decode step's ids are checked by `embed_ids` only when the lookup fails."""
    if torch.compiler.is_compiling():
        return
    if input_ids is not None and (input_ids.dim() != 2 or input_ids.dtype.is_floating_point or input_ids.is_complex()):
        raise ValueError(
            f"{owner}: `input_ids` must be integer token ids of shape (batch, length), got {input_ids.dtype} of "
            f"shape {tuple(input_ids.shape)}; pass a batch of 1-D sequences (a single sequence as ids[None])"
        )
    if input_ids is None and inputs_embeds is not None:
        width = inputs_embeds.shape[-1] if inputs_embeds.dim() else None
        if inputs_embeds.dim() != 3 or hidden_size not in (None, width) or not inputs_embeds.is_floating_point():
            raise ValueError(
                f"{owner}: `inputs_embeds` must be floats of shape (batch, length, {hidden_size or 'hidden'}), got "
                f"{inputs_embeds.dtype} of shape {tuple(inputs_embeds.shape)}"
            )
    shape = tuple((input_ids if input_ids is not None else inputs_embeds).shape)
    if len(shape) < 2 or 0 in shape[:2]:
        raise ValueError(f"{owner}: empty input of shape {shape}; pass at least one token per row, as (batch, length)")
    if input_ids is not None and past_length == 0:
        low, high = (int(v) for v in torch.aminmax(input_ids))  # one pass, one device sync
        if low < 0 or high >= vocab_size:
            bad = high if high >= vocab_size else low
            raise ValueError(
                f"{owner}: token id {bad} is outside the vocabulary [0, {vocab_size}); was the input made by another "
                "model's tokenizer?"
            )
    if attention_mask is not None and attention_mask.dim() not in (2, 4):
        raise ValueError(
            f"{owner}: `attention_mask` of shape {tuple(attention_mask.shape)}: pass (batch, length) with 1 for "
            "tokens and 0 for padding (or a 4-D (batch, 1, query, key) mask)"
        )
    if attention_mask is not None and attention_mask.dim() == 2:
        expected = (shape[0], past_length + shape[1])
        if tuple(attention_mask.shape) != expected:
            raise ValueError(
                f"{owner}: `attention_mask` of shape {tuple(attention_mask.shape)}, expected {expected} "
                f"(batch, cached {past_length} + new {shape[1]} tokens)"
            )


# Copied from plldr_hf.models.agf.modeling_agf.check_position_ids
def check_position_ids(owner: str, position_ids: torch.Tensor, batch: int, length: int) -> int | None:
    """Explicit position ids: integers of shape (batch, length) or (1, length) for the call's new tokens, none
    negative (a negative position would read a RoPE table from its end, or shift every relative distance).
    Returns the largest position (read in the same device sync as the smallest), or None under torch.compile."""
    if torch.compiler.is_compiling():
        return None
    shape = tuple(position_ids.shape)
    if position_ids.is_floating_point() or len(shape) != 2 or shape[0] not in (1, batch) or shape[1] != length:
        expected = f"(1, {length})" if batch == 1 else f"({batch}, {length}) or (1, {length})"
        raise ValueError(
            f"{owner}: `position_ids` must be integers of shape {expected}, one per new token, got "
            f"{position_ids.dtype} of shape {shape}"
        )
    low, high = (int(v) for v in torch.aminmax(position_ids))  # one pass, one device sync
    if low < 0:
        raise ValueError(f"{owner}: `position_ids` must be >= 0 (a token's index in its sequence), got {low}")
    return high


# Copied from plldr_hf.models.agf.modeling_agf.check_label_ids
def check_label_ids(owner: str, name: str, labels: torch.Tensor, vocab_size: int) -> None:
    """Labels are integer token ids in [0, vocab) or -100 (ignored by the loss): a label outside the vocabulary
    would be an index error inside the cross-entropy (a device assert on CUDA)."""
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"{owner}: `{name}` must be integer token ids (-100 where ignored), got {labels.dtype}")
    if torch.compiler.is_compiling() or labels.numel() == 0:
        return
    low, high = (int(v) for v in torch.aminmax(labels.masked_fill(labels == -100, 0)))  # one device sync
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{owner}: `{name}` holds token id {high if high >= vocab_size else low}, outside the vocabulary "
            f"[0, {vocab_size}); use -100 for positions the loss ignores"
        )


# Copied from plldr_hf.models.agf.modeling_agf.embed_ids
def embed_ids(embedding: nn.Module, input_ids: torch.Tensor, owner: str, vocab_size: int) -> torch.Tensor:
    """`embedding(input_ids)`; an id outside the vocabulary (a decode step's ids are not checked up front) becomes
    an error naming it instead of torch's bare `index out of range in self`. The check runs only on that error
    path, so correct inputs cost no device sync."""
    try:
        return embedding(input_ids)
    except IndexError as error:
        outside = input_ids[(input_ids < 0) | (input_ids >= vocab_size)]
        if outside.numel() == 0:
            raise
        raise ValueError(
            f"{owner}: token id {int(outside[0])} is outside the vocabulary [0, {vocab_size}); was the input made by "
            "another model's tokenizer?"
        ) from error


def check_lm_labels(owner: str, labels, shift_labels, given, vocab_size: int) -> None:
    """Causal-LM labels: the input ids themselves, (batch, length), and token ids (`check_label_ids`)."""
    for name, value in (("labels", labels), ("shift_labels", shift_labels)):
        if value is None:
            continue
        if given is not None and tuple(value.shape) != tuple(given.shape[:2]):
            raise ValueError(
                f"{owner}: `{name}` of shape {tuple(value.shape)} for inputs of shape {tuple(given.shape[:2])}; "
                "causal-LM labels are the input ids themselves (batch, length), shifted inside the loss"
            )
        check_label_ids(owner, name, value, vocab_size)


def dag_weights_of(owner: str, dag_weights, default: tuple[float, float, float]) -> tuple[float, float, float]:
    """The DAG weights (A_LM, A_P, G_LM) of one call: `default` (the config's) or the given three, which must be
    finite and non-negative (a NaN makes the loss NaN; a negative weight rewards a cyclic graph)."""
    if dag_weights is None:
        return default
    try:
        weights = tuple(float(w) for w in dag_weights)
    except (TypeError, ValueError):
        weights = ()
    if len(weights) != 3 or not all(math.isfinite(w) and w >= 0 for w in weights):
        raise ValueError(
            f"{owner}: `dag_weights` must be three finite non-negative numbers (A_LM, A_P, G_LM), got {dag_weights!r}"
        )
    return weights
