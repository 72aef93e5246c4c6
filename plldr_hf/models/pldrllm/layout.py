"""How one forward call lays out its tokens: positions, the attention mask, packed sequences, and what every layer's
Power Law Graph Attention is told (`PlgaCall`). `call_layout` is the one step between a call's inputs and the layers
of `PldrllmModel.forward`; each row of this table is a case it tells apart (one test each in
`tests/models/pldrllm/test_layout_pldrllm.py`):

| case | when | result |
|---|---|---|
| packed row | no mask, `position_ids` restarting at 0 inside a row, empty cache, more than one token | one segment per sequence: its own Gram matrix and attention block; every token is text, pad ids included |
| unmasked pads | no mask and no `position_ids`, empty cache, the pad id a token of its own | a mask from the pad ids, so pads stay out of the Gram matrix and attention (lm-evaluation-harness right-pads with id 0 and passes no mask) |
| 2-D mask | a (batch, length) mask | positions count the unmasked tokens (left padding), masked positions stay out of the Gram matrix |
| plain | anything else (a 4-D mask, a filled cache, a paged cache) | positions continue the cache: past + 0, 1, … |

`reference_padding=True` (the released code's behaviour) turns the first three off: every position enters the Gram
matrix, and positions are 0, 1, … whatever the mask. A fixed G (collapsed or `custom_G_type`) has no Gram matrix, so
no Gram weights. With the reference RoPE table (`reference_rope`), a position past `max_position_embeddings` is an
error naming the lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .configuration_pldrllm import PldrllmConfig
from .inputs import check_position_ids
from .plga import PlgaCall, packed_segment_ids


@dataclass
class CallLayout:
    """Positions (B, S), the attention mask for transformers' mask builder (as passed, or made from pad ids), and
    the `PlgaCall` every layer receives."""

    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    plga: PlgaCall

    @property
    def packed(self) -> bool:
        return self.plga.segment_ids is not None


def pad_is_own_token(config: PldrllmConfig) -> bool:
    """Whether the pad id marks padding only (not None, not also BOS or EOS, where a pad id can be real text)."""
    eos = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    return config.pad_token_id is not None and config.pad_token_id not in {config.bos_token_id, *eos}


def pad_id_mask(config: PldrllmConfig, input_ids: torch.Tensor) -> torch.Tensor | None:
    """(B, S) mask with 0 at the pad ids of an unmasked batch, or None when it holds none."""
    pads = input_ids == config.pad_token_id
    return (~pads).long() if bool(pads.any()) else None


def call_layout(
    config: PldrllmConfig,
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    *,
    batch: int,
    seq_len: int,
    past_len: int,
    device: torch.device,
    output_dag_losses: bool = False,
    cache_first_G: bool = False,
    warn_unmasked=None,
) -> CallLayout:
    """The layout of one call (module docstring). `past_len` is the filled cache length (0 for a paged cache, whose
    positions and 4-D mask come with the call). `warn_unmasked(input_ids)` is called for an unmasked batch whose pads
    cannot be told from text (transformers' one-time warning)."""
    compiling = torch.compiler.is_compiling()
    fixed = config.has_fixed_G
    tracked = not config.reference_padding
    positions_given = position_ids is not None
    if position_ids is not None and position_ids.dim() == 1:
        position_ids = position_ids[None]
    # the largest position given, read with the check; None when positions are derived below (or compiling)
    highest = check_position_ids("PldrllmModel", position_ids, batch, seq_len) if position_ids is not None else None

    segment_ids, num_segments = None, 1
    # packing is read off the positions before anything else: a packed row has no padding, so its pad ids are text.
    # `not compiling` comes first: under torch.export a StaticCache's `past_len` is a tensor, and comparing it would
    # be a data-dependent branch
    if not compiling and tracked and attention_mask is None and position_ids is not None and past_len == 0:
        if seq_len > 1:
            segments, count = packed_segment_ids(position_ids)
            if count > 1:
                segment_ids, num_segments = segments.expand(batch, -1), count
    elif not compiling and attention_mask is None and position_ids is None and input_ids is not None and past_len == 0:
        if tracked and pad_is_own_token(config):
            attention_mask = pad_id_mask(config, input_ids)
        elif warn_unmasked is not None:
            warn_unmasked(input_ids)

    mask_2d = attention_mask is not None and attention_mask.dim() == 2
    if tracked and mask_2d and position_ids is None:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -seq_len:]
    gram_weights = attention_mask[:, -seq_len:] if tracked and mask_2d and not fixed else None

    if config.reference_rope and compiling and isinstance(past_len, int) and past_len == 0 and not positions_given:
        # in a traced graph (torch.export, ONNX, torch.compile) the bound is a symbolic check: export refuses a
        # length range past the table, and the exported program refuses longer inputs, as eager does below. Not
        # with positions from the caller: a row of several sequences (vLLM's Transformers backend flattens a batch
        # into one) may be longer than the table while every position is in it; the index below bounds those
        limit = int(config.max_position_embeddings)  # a constant, as torch.compile wants the message's closure
        torch._check(seq_len <= limit, lambda: f"PLDR-LLM: sequence length exceeds max_position_embeddings={limit}")
    # a StaticCache reports its length as a tensor: the check would be a data-dependent branch under torch.compile
    if config.reference_rope and not compiling:
        # the longest position decides (a packed row may be longer than any of its sequences)
        if position_ids is None:
            longest = past_len + seq_len
        else:
            longest = (highest if highest is not None else int(position_ids.max())) + 1
        if longest > config.max_position_embeddings:
            # a decode step past the table: generation ran out of positions, not the prompt
            fix = (
                "lower max_new_tokens (or max_length) so that prompt + new tokens fit"
                if past_len
                else "truncate the input"
            )
            raise ValueError(
                f"PLDR-LLM: sequence length {longest} (cached {past_len} + new {seq_len}) exceeds "
                f"max_position_embeddings={config.max_position_embeddings}, the length of the reference RoPE table "
                f"(reference_rope=True); {fix}"
            )
    if position_ids is None:
        position_ids = torch.arange(seq_len, device=device)[None] + past_len
    if config.reference_rope and compiling:
        # the table's bound inside the graph: positions read through an index of the table's length, which a runtime
        # that keeps no shape ranges (onnxruntime) still refuses past the end (its Gather's bounds check)
        position_ids = torch.arange(config.max_position_embeddings, device=device)[position_ids]
    plga = PlgaCall(
        gram_weights=gram_weights,
        segment_ids=segment_ids,
        num_segments=num_segments,
        dag_form=config.dag_loss_form if output_dag_losses and not fixed else None,
        cache_first_G=cache_first_G,
    )
    return CallLayout(position_ids=position_ids.expand(batch, -1), attention_mask=attention_mask, plga=plga)
