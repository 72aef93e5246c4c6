r"""AGF / PCM-V translation Transformer: an encoder–decoder whose attention takes position from one config switch.

Self-contained for `trust_remote_code`: imports only torch, transformers (public names), the standard library and
its siblings (`configuration_agf.py`, `positions.py`, `rotary.py`, `position_encodings.py`). AGF and PCM-V: arXiv 2603.04805 (only its abstract is public; LC1–LC3 as described there);
baselines: each function names its paper.

Notable features (what differs from Marian/BART):

- `position_encoding="agf"` (default): no absolute position vectors; a strictly positive coefficient c_h(m, n) of
  the relative distance multiplies the scaled logit, a = softmax((q·k/√d)·c + mask), mask added after the
  multiplication (adding the mask first would scale −∞ by c). c = exp(log c) is built in float32 from three
  switchable parts: LC1 per-head directional power law, LC2 per-distance amplitude, LC3 per-feature weights (separable form, below).
- `pcmv=True`: the values are weighted by the coefficient once more after the softmax, o_m = Σ_n a_mn·c_mn·v_n,
  without renormalising. Returned attention weights are the effective weights a·c.
- Baselines behind the same switch: sinusoidal (vanilla), RoPE, ALiBi, KERPLE power / log, T5 buckets, none.
- Two attention paths with one result: the eager reference (materialised scores; default, trains everywhere) and a
  FlexAttention path (`attn_implementation="flex_attention"`): AGF as a `score_mod`, PCM-V by the exact two-pass
  log-sum-exp identity o = exp(lse' − lse)·softmax(s + log c)·V. Fully masked query rows give 0.
- Relative distances always come from real token positions (cumulative sum of the 2D attention mask), so left
  padding and cached decoding see the same δ as an unpadded, uncached run.
- The LM loss is cross-entropy on the given (unshifted) labels, divided by `num_items_in_batch` when the Trainer
  passes it; `self.loss_function` is not used because for `ForConditionalGeneration` it shifts the labels again.

The position maths, its parameters and the symbol table are in `positions.py`; the names of the encodings in
`position_encodings.py`. Each stack computes its position data once per forward (`PositionContext`: real
positions, RoPE angles, the distance table; the terms of position parameters shared by its layers) and hands it
to every layer; attention never receives a module.

| symbol | meaning | code |
|---|---|---|
| c_v | PCM-V coefficient: c itself or a separate LC1·LC2 | `value_coefficient` (when `pcmv_coefficient="separate"`) |

LC3 enters separably: Σ_j q_j·k_j·c·w_j = c·((q ⊙ w)·k), so it scales the query before the logit and,
with PCM-V, the head output; it never needs a per-feature score matrix.
"""

import functools
import inspect
import math
import os
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, flex_attention
from transformers import AttentionInterface, GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.utils import can_return_tuple

from .configuration_agf import AgfConfig, check_buildable
from .positions import (
    AgfPositionCoefficient,
    AttentionPositionTerms,
    KerpleBias,
    PositionContext,
    T5RelativeBias,
    add_absolute_positions,
    cross_attention_context,
    gather_distance_table,
    position_modules,
    position_terms,
    positions_from_mask,
    self_attention_context,
    shares_positions,
)
from .rotary import apply_rotary


try:
    # torch >= 2.9 requests the log-sum-exp through AuxRequest; `return_lse=True` is deprecated there
    from torch.nn.attention.flex_attention import AuxRequest
except ImportError:
    AuxRequest = None


# version shim: transformers 5.24 renamed the cache keyword and output field `past_key_values` -> `cache` (5.23 knows
# only `past_key_values`; the old name is deprecated until 5.40). Forward signatures accept both spellings; the mask
# helpers and the output dataclasses get the installed one. The remote code of each family carries this shim and the
# input checks below as marked copies (tests/test_copies.py keeps them equal).
CACHE_NAME = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"


def merge_cache_kwargs(cache: Cache | None, past_key_values: Cache | None, owner: str) -> Cache | None:
    """One cache from either spelling; the old one warns where transformers deprecates it, as in-tree models do."""
    if past_key_values is not None:
        if cache is not None and cache is not past_key_values:
            raise ValueError(f"{owner}: pass the cache as `cache` or `past_key_values`, not both")
        if CACHE_NAME == "cache":
            warnings.warn(
                f"`past_key_values` is deprecated and will be removed in version 5.40.0 for `{owner}`. "
                "Use `cache` instead.",
                FutureWarning,
                stacklevel=3,
            )
    given = cache if cache is not None else past_key_values
    if isinstance(given, tuple | list):
        raise ValueError(
            f"{owner}: the cache must be a transformers Cache object (e.g. DynamicCache, EncoderDecoderCache, "
            "as generate() returns it), got a tuple; transformers 5 has no tuple caches"
        )
    return given


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


def remember_local_folder(model, pretrained_model_name_or_path):
    """Record a local folder's absolute path as `model.name_or_path`: PEFT writes it into an adapter's
    `base_model_name_or_path`, which must load from any working directory. Hub ids stay as given."""
    loaded = model[0] if isinstance(model, tuple) else model
    if isinstance(pretrained_model_name_or_path, (str, os.PathLike)) and os.path.isdir(pretrained_model_name_or_path):
        loaded.name_or_path = loaded.config.name_or_path = os.path.abspath(pretrained_model_name_or_path)
    return model


def shift_tokens_right(input_ids: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Labels → decoder inputs: prepend the start token, drop the last label, and turn -100 into padding."""
    if pad_token_id is None or decoder_start_token_id is None:
        raise ValueError(
            "`pad_token_id` and `decoder_start_token_id` must be set to derive decoder inputs from labels"
        )
    shifted = input_ids.new_zeros(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def _split_mask(attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A bool (True = attend) or additive float mask → (keep, additive part on kept entries or None)."""
    if attention_mask.dtype == torch.bool:
        return attention_mask, None
    keep = attention_mask > torch.finfo(attention_mask.dtype).min / 2
    return keep, attention_mask.float().masked_fill(~keep, 0.0)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    attention_terms: AttentionPositionTerms | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference path. q, k, v (B, H, L, d) → output (B, Lq, H, d), effective weights (B, H, Lq, Lk).

    Order: s = (q·kᵀ·scaling)·c + bias, then the mask, softmax, dropout, ·c_v, ·V. Everything after the matmul is
    float32, so the coefficient never meets a low-precision mask value. Fully masked query rows output 0.
    """
    scores = torch.matmul(query, key.transpose(2, 3))
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32)) * scaling
    value_weight = None
    if attention_terms is not None:
        num_heads = query.shape[1]
        if torch.compiler.is_compiling():
            # torch.export / torch.compile: the table's length (δ_max − δ_min + 1) depends on the data, so the terms
            # run on every score instead (the same elementwise formula on the same δ values: the same numbers)
            head, delta = attention_terms.grid(num_heads)

            def per_score(term: Callable, exp: bool = False) -> torch.Tensor:
                values = term(head, delta).float().expand(delta.shape[0], num_heads, *delta.shape[2:])
                return torch.exp(values) if exp else values

        else:
            head, distances, index = attention_terms.distance_table(num_heads)

            def per_score(term: Callable, exp: bool = False) -> torch.Tensor:
                # the term on every (head, distance) pair once, exp'd there if asked, then gathered per score
                table = term(head, distances).float().expand(num_heads, distances.shape[-1])
                return gather_distance_table(torch.exp(table) if exp else table, index)

        coefficient = None
        if attention_terms.log_coefficient is not None:
            coefficient = per_score(attention_terms.log_coefficient, exp=True)
            scores = scores * coefficient
        if attention_terms.bias is not None:
            scores = scores + per_score(attention_terms.bias)
        if attention_terms.value_log_coefficient is not None:
            if attention_terms.value_log_coefficient is attention_terms.log_coefficient:
                value_weight = coefficient
            else:
                value_weight = per_score(attention_terms.value_log_coefficient, exp=True)
    keep = None
    if attention_mask is not None:
        keep, additive = _split_mask(attention_mask)
        if additive is not None:
            scores = scores + additive
        # finfo.min rather than -inf: a fully masked row stays finite (no NaN gradient) and is zeroed below
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    attn_weights = torch.softmax(scores, dim=-1)
    if keep is not None:
        attn_weights = attn_weights * keep.any(dim=-1, keepdim=True)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    if value_weight is not None:
        attn_weights = attn_weights * value_weight
    attn_output = torch.matmul(attn_weights.to(value.dtype), value)
    return attn_output.transpose(1, 2).contiguous(), attn_weights


@functools.cache
def _compiled_flex_attention() -> Callable:
    return torch.compile(flex_attention, dynamic=False)


def _flex_attention_fn(device: torch.device) -> Callable:
    # the CPU build has no flex backward and its compiled form cannot return the lse (torch 2.13), so
    # CPU runs the unfused eager flex (forward checks only); accelerators get the compiled kernel
    return flex_attention if device.type == "cpu" else _compiled_flex_attention()


def _flex_with_lse(flex: Callable, query, key, value, score_mod, block_mask, scale):
    if AuxRequest is not None:
        out, aux = flex(
            query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale, return_aux=AuxRequest(lse=True)
        )
        return out, aux.lse
    return flex(query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale, return_lse=True)


def flex_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | BlockMask | None,
    scaling: float,
    dropout: float = 0.0,
    attention_terms: AttentionPositionTerms | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """FlexAttention path (pytorch.org/docs/stable/nn.attention.flex_attention.html): the same result as `eager_attention_forward`, no score matrix kept.

    AGF is a `score_mod` (score·c + bias, masked entries −inf). PCM-V needs a second pass: with s' the modified
    logits, o = Σ a·c_v·v = exp(lse(s' + log c_v) − lse(s'))·softmax(s' + log c_v)·V; rows with lse = −inf (fully
    masked) get factor 0. Attention dropout is not available here.
    """
    if dropout > 0.0:
        raise ValueError(
            "the flex attention path has no attention dropout; train with attention_dropout=0 or the eager path"
        )
    batch, num_heads, q_len, _ = query.shape
    kv_len = key.shape[2]
    block_mask = attention_mask if isinstance(attention_mask, BlockMask) else None
    keep = additive = None
    if isinstance(attention_mask, torch.Tensor):
        keep, additive = _split_mask(attention_mask)
        keep = keep.expand(batch, num_heads, q_len, kv_len)
        if additive is not None:
            additive = additive.expand(batch, num_heads, q_len, kv_len)
    terms = attention_terms
    # plain locals (module-level functions, argument tuples) for Dynamo to guard; see `PositionTerm`
    coefficient_fn = coefficient_args = bias_fn = bias_args = value_fn = value_args = None
    if terms is not None:
        q_pos = terms.query_positions.expand(batch, q_len)
        k_pos = terms.key_positions.expand(batch, kv_len)
        if terms.log_coefficient is not None:
            coefficient_fn, coefficient_args = terms.log_coefficient.fn, terms.log_coefficient.args
        if terms.bias is not None:
            bias_fn, bias_args = terms.bias.fn, terms.bias.args
        if terms.value_log_coefficient is not None:
            value_fn, value_args = terms.value_log_coefficient.fn, terms.value_log_coefficient.args

    def logit_mod(score, b, h, q_idx, kv_idx):
        if terms is not None:
            delta = q_pos[b, q_idx] - k_pos[b, kv_idx]
            if coefficient_fn is not None:
                score = score * torch.exp(coefficient_fn(h, delta, *coefficient_args))
            if bias_fn is not None:
                score = score + bias_fn(h, delta, *bias_args)
        if keep is not None:
            if additive is not None:
                score = score + additive[b, h, q_idx, kv_idx]
            score = torch.where(keep[b, h, q_idx, kv_idx], score, -float("inf"))
        return score

    flex = _flex_attention_fn(query.device)
    if value_fn is None:
        attn_output = flex(query, key, value, score_mod=logit_mod, block_mask=block_mask, scale=scaling)
    else:

        def value_mod(score, b, h, q_idx, kv_idx):
            delta = q_pos[b, q_idx] - k_pos[b, kv_idx]
            return logit_mod(score, b, h, q_idx, kv_idx) + value_fn(h, delta, *value_args)

        # pass 1 only contributes its lse; pass 2 is softmax(s' + log c_v)·V with its own lse
        _, lse = _flex_with_lse(flex, query, key, value, logit_mod, block_mask, scaling)
        attn_output, value_lse = _flex_with_lse(flex, query, key, value, value_mod, block_mask, scaling)
        dead = torch.isneginf(lse)
        # where() before exp(): exp(−inf − (−inf)) is NaN, and a NaN branch would leak into the gradient
        log_ratio = torch.where(dead, torch.zeros_like(lse), value_lse.float() - lse.float())
        ratio = torch.exp(log_ratio).masked_fill(dead, 0.0)  # R_m = Σ_n a_mn·c_mn, (B, H, Lq)
        attn_output = attn_output * ratio[..., None].to(attn_output.dtype)
    return attn_output.transpose(1, 2).contiguous(), None


class AgfAttentionInterface(AttentionInterface):
    """Backends for this file only. The stock sdpa / flash functions cannot apply a multiplicative coefficient, so
    this registry holds only the coefficient-aware functions; "eager" resolves to `eager_attention_forward`."""

    _global_mapping = {"flex_attention": flex_attention_forward}


# the attention backends of this file, under a name of its own (transformers' global registry is
# `ALL_ATTENTION_FUNCTIONS`); `AgfPreTrainedModel._can_set_attn_implementation` says the model dispatches through it
AGF_ATTENTION_FUNCTIONS = AgfAttentionInterface()


class AgfAttention(nn.Module):
    """Multi-head attention (self or cross) with the configured position encoding.

    It gets its position data from the stack (`PositionContext`: positions and RoPE angles, computed once per
    forward) and, when the stack shares them across layers, the evaluated terms (`shared_terms`); per-layer
    position parameters (`position_encoding`, `value_coefficient`) are its own and evaluated here.
    """

    def __init__(
        self,
        config: AgfConfig,
        embed_dim: int,
        num_heads: int,
        *,
        dropout: float = 0.0,
        is_causal: bool = False,
        is_cross_attention: bool = False,
        layer_idx: int | None = None,
        position_module: nn.Module | None = None,
        value_coefficient: nn.Module | None = None,
        pcmv: bool = False,
    ):
        super().__init__()
        self.config = config
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = dropout
        self.is_causal = is_causal
        self.is_cross_attention = is_cross_attention
        self.layer_idx = layer_idx
        self.num_key_value_groups = 1
        self.pcmv = pcmv
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        # the state-dict name saved AGF checkpoints use for per-layer position parameters (`*.self_attn.position_encoding.*`)
        self.position_encoding = position_module
        self.value_coefficient = value_coefficient

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | BlockMask | None = None,
        positions: PositionContext | None = None,
        shared_terms: AttentionPositionTerms | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, q_len = hidden_states.shape[:2]
        # (B, H, Lq, d)
        query_states = self.q_proj(hidden_states).view(batch, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        rotary = positions.rotary if positions is not None else None

        is_cross = key_value_states is not None
        is_updated = False
        layer_cache = None
        if cache is not None:
            is_updated = bool(cache.is_updated.get(self.layer_idx)) if is_cross else False
            layer_cache = cache.cross_attention_cache if is_cross else cache.self_attention_cache
        if is_cross and is_updated:
            # the encoder K/V were computed at the first decoding step
            key_states = layer_cache.layers[self.layer_idx].keys
            value_states = layer_cache.layers[self.layer_idx].values
        else:
            current = key_value_states if is_cross else hidden_states
            kv_shape = (batch, current.shape[1], self.num_heads, self.head_dim)
            key_states = self.k_proj(current).view(kv_shape).transpose(1, 2)
            value_states = self.v_proj(current).view(kv_shape).transpose(1, 2)
            if rotary is not None:
                # new keys sit at the query positions; cached keys were rotated when they were new
                key_states = apply_rotary(key_states, *rotary)
            if layer_cache is not None:
                key_states, value_states = layer_cache.update(key_states, value_states, self.layer_idx)
                if is_cross:
                    cache.is_updated[self.layer_idx] = True
        if rotary is not None:
            query_states = apply_rotary(query_states, *rotary)

        terms = shared_terms
        if self.position_encoding is not None:
            terms = position_terms((self.position_encoding, self.value_coefficient), positions, self.pcmv)
        feature_weight = terms.feature_weight if terms is not None else None  # LC3, (H, d)
        if feature_weight is not None:
            query_states = query_states * feature_weight[None, :, None, :].to(query_states.dtype)

        attention_interface: Callable = AGF_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query_states,
            key_states,
            value_states,
            attention_mask,
            scaling=self.scaling,
            dropout=self.dropout if self.training else 0.0,
            attention_terms=terms,
        )
        # (B, Lq, H, d)
        if self.pcmv and feature_weight is not None:
            # LC3 on the PCM-V side: o_j = w_j·Σ_n a·c·v_j (the separable form, arXiv 2603.04805)
            attn_output = attn_output * feature_weight[None, None].to(attn_output.dtype)
        attn_output = self.out_proj(attn_output.reshape(batch, q_len, self.embed_dim))
        return attn_output, attn_weights


class _AgfLayer(GradientCheckpointingLayer):
    """What the encoder and decoder blocks share: the self-attention block and the feed-forward block, built and run
    the same way (post-LN, Marian/BART wiring). Parameter names are those of BART / Marian."""

    def _build_self_attention(self, config: AgfConfig, layer_idx: int, heads: int, *, causal: bool, own: bool):
        self.embed_dim = config.d_model
        self.dropout = config.dropout
        position, value = position_modules(config, heads, causal=causal) if own else (None, None)
        self.self_attn = AgfAttention(
            config,
            self.embed_dim,
            heads,
            dropout=config.attention_dropout,
            is_causal=causal,
            layer_idx=layer_idx,
            position_module=position,
            value_coefficient=value,
            pcmv=config.pcmv,
        )
        self.self_attn_layer_norm = nn.LayerNorm(self.embed_dim)

    def _build_feed_forward(self, config: AgfConfig, ffn_dim: int):
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.fc1 = nn.Linear(self.embed_dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, self.embed_dim)
        self.final_layer_norm = nn.LayerNorm(self.embed_dim)

    def _add_and_norm(self, residual: torch.Tensor, block_output: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        return norm(residual + F.dropout(block_output, p=self.dropout, training=self.training))

    def _self_attention(self, hidden_states, attention_mask, positions, shared_terms, **attention_kwargs):
        output, weights = self.self_attn(
            hidden_states,
            attention_mask=attention_mask,
            positions=positions,
            shared_terms=shared_terms,
            **attention_kwargs,
        )
        return self._add_and_norm(hidden_states, output, self.self_attn_layer_norm), weights

    def _feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        output = self.activation_fn(self.fc1(hidden_states))
        output = F.dropout(output, p=self.activation_dropout, training=self.training)
        return self._add_and_norm(hidden_states, self.fc2(output), self.final_layer_norm)


class AgfEncoderLayer(_AgfLayer):
    """Post-LN encoder block (Marian/BART wiring); the position encoding lives inside `self_attn`."""

    def __init__(self, config: AgfConfig, layer_idx: int, share_positions: bool):
        super().__init__()
        heads = config.encoder_attention_heads
        self._build_self_attention(config, layer_idx, heads, causal=False, own=not share_positions)
        self._build_feed_forward(config, config.encoder_ffn_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | BlockMask | None = None,
        positions: PositionContext | None = None,
        shared_terms: AttentionPositionTerms | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        hidden_states, attn_weights = self._self_attention(hidden_states, attention_mask, positions, shared_terms)
        return self._feed_forward(hidden_states), attn_weights


class AgfDecoderLayer(_AgfLayer):
    r"""Post-LN decoder block (Marian/BART wiring) and where the position terms act::

        hidden_states
         ├─────────────┐
         │         self_attn      a = softmax((q·kᵀ/√d)·c(δ) + causal/padding mask),  o = (a ⊙ c_v)·V
         │             │          c: AGF coefficient (1 for other encodings; + bias for ALiBi/KERPLE/T5)
         (+) ◄─────────┘          c_v: PCM-V only; δ = query − key from real positions, cached keys included
         LN
         ├─────────────┐
         │         encoder_attn   a = softmax(q·kᵀ/√d + source padding mask),  o = a·V
         (+) ◄─────────┘          (·c(δ) and PCM-V only with agf_cross_attention "relative" or "normalized")
         LN
         ├─────────────┐
         │         fc1 → act → fc2
         (+) ◄─────────┘
         LN
         out

    The encoder layer has the self-attention and feed-forward rows only, with no causal mask and with directional
    (±δ) AGF parameters.
    """

    def __init__(self, config: AgfConfig, layer_idx: int, share_positions: bool):
        super().__init__()
        heads = config.decoder_attention_heads
        own = not share_positions
        self._build_self_attention(config, layer_idx, heads, causal=True, own=own)
        cross_position, cross_value = (
            position_modules(config, heads, causal=False, cross=True) if own else (None, None)
        )
        self.encoder_attn = AgfAttention(
            config,
            self.embed_dim,
            heads,
            dropout=config.attention_dropout,
            is_cross_attention=True,
            layer_idx=layer_idx,
            position_module=cross_position,
            value_coefficient=cross_value,
            pcmv=config.pcmv and config.agf_cross_attention != "none",
        )
        self.encoder_attn_layer_norm = nn.LayerNorm(self.embed_dim)
        self._build_feed_forward(config, config.decoder_ffn_dim)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | BlockMask | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | BlockMask | None = None,
        positions: PositionContext | None = None,
        cross_positions: PositionContext | None = None,
        shared_terms: AttentionPositionTerms | None = None,
        cross_shared_terms: AttentionPositionTerms | None = None,
        cache: EncoderDecoderCache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        hidden_states, self_weights = self._self_attention(
            hidden_states, attention_mask, positions, shared_terms, cache=cache
        )
        cross_weights = None
        # run without encoder states (the decoder as a plain LM), there is nothing to cross-attend to: skip the block,
        # as BART / Marian do, instead of letting it attend to the decoder's own states unmasked
        if encoder_hidden_states is not None:
            output, cross_weights = self.encoder_attn(
                hidden_states,
                key_value_states=encoder_hidden_states,
                attention_mask=encoder_attention_mask,
                positions=cross_positions,
                shared_terms=cross_shared_terms,
                cache=cache,
            )
            hidden_states = self._add_and_norm(hidden_states, output, self.encoder_attn_layer_norm)
        return self._feed_forward(hidden_states), self_weights, cross_weights


# the longest |δ| `coefficient_curves` evaluates: a curve is 2·max_distance + 1 values per head
MAX_CURVE_DISTANCE = 100_000


class AgfPreTrainedModel(PreTrainedModel):
    """Shared base of the AGF classes: config class, capability flags, weight init and `coefficient_curves`."""

    config_class = AgfConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["AgfEncoderLayer", "AgfDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values", "cache"]
    # eager is the default and the reference; flex_attention is the fused path. sdpa / flash cannot apply a
    # multiplicative coefficient and are not offered.
    _supports_flex_attn = True

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        # transformers looks for its own registry's name in the model file; this one dispatches through
        # `AGF_ATTENTION_FUNCTIONS`, so `set_attn_implementation("flex_attention")` works all the same
        return True

    _supports_sdpa = False
    _supports_flash_attn = False

    def __init__(self, config, *args, **kwargs):
        # every class checks its config before anything is built from it (PreTrainedModel first derives a
        # generation config, which compares the token ids)
        check_buildable(config)
        super().__init__(config, *args, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`; a local folder is remembered by its absolute path
        (`remember_local_folder`)."""
        model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        return remember_local_folder(model, pretrained_model_name_or_path)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Initialise every weight; raw parameters only here (transformers skips tensors loaded from a checkpoint).

        | parameter | init |
        |---|---|
        | `nn.Linear` weight / bias | normal(0, `init_std`) / 0 (transformers default) |
        | `nn.Embedding` (`shared`, `embed_tokens`) | normal(0, `init_std`), padding row 0 (transformers default) |
        | `nn.LayerNorm` | weight 1, bias 0 (transformers default) |
        | AGF `radius_raw` ρ | softplus⁻¹(r − ε_r), r log-spaced over heads in [1, 64] |
        | AGF `exponent` k | log-spaced over heads from 2 down to 0.25; 0 with `agf_init="flat"` |
        | AGF `base_raw` β | softplus⁻¹(1), i.e. Base = 1 |
        | AGF `amplitude_raw`, `feature_weight_raw` | 0, i.e. A = w = 1 |
        | KERPLE `bias_a` / `bias_p` | U(0, 1) / U(0, 2) (official code) |
        | T5 `relative_attention_bias` | normal(0, d_model^(−1/2)) (HF T5) |
        """
        super()._init_weights(module)
        if isinstance(module, AgfPositionCoefficient):
            for name, value in module.initial_values().items():
                param = getattr(module, name)
                init.copy_(param, value.to(device=param.device, dtype=param.dtype))
        elif isinstance(module, KerpleBias):
            init.uniform_(module.bias_a, 0.0, 1.0)
            init.uniform_(module.bias_p, 0.0, 2.0)
        elif isinstance(module, T5RelativeBias):
            init.normal_(module.relative_attention_bias.weight, mean=0.0, std=self.config.d_model**-0.5)

    @torch.no_grad()
    def coefficient_curves(
        self, max_distance: int = 64, initial: bool = False
    ) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """The learned AGF curves c_h(δ) (LC1·LC2) of every AGF module, for plots and inspection.

        Returns `{module name: (distances (N,), coefficients (H, N))}` in float32 on the CPU. Distances are
        −max_distance … max_distance, or 0 … max_distance for causal decoder self-attention (which never sees the
        future side). LC3 is position-free and not part of the curves. Empty unless `position_encoding="agf"`.
        `initial=True`: the same curves at their initialisation, to show how far training moved them.
        """
        if (
            isinstance(max_distance, bool)
            or not isinstance(max_distance, int)
            or not 1 <= max_distance <= MAX_CURVE_DISTANCE
        ):
            raise ValueError(
                f"`max_distance` must be an integer in [1, {MAX_CURVE_DISTANCE:,}] (each curve holds 2·max_distance + 1 "
                f"values per head), got {max_distance!r}"
            )
        curves = {}
        for name, module in self.named_modules():
            if isinstance(module, AgfPositionCoefficient) and module.has_position_terms:
                low = 0 if module.causal else -max_distance
                device = next(module.parameters()).device
                distances = torch.arange(low, max_distance + 1, device=device)
                curves[name] = (distances.cpu(), module.coefficient(distances, initial=initial).float().cpu())
        return curves


class AgfScaledWordEmbedding(nn.Embedding):
    """Token embedding times `embed_scale` (√d_model with `scale_embedding`), applied inside the module, so that
    `inputs_embeds = model.get_input_embeddings()(input_ids)` gives the same outputs as `input_ids` (as BART / Marian's
    scaled embeddings do). One module is shared by the encoder, the decoder and (tied) the LM head."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None, embed_scale: float = 1.0):
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.embed_scale = embed_scale

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids) * self.embed_scale


def _embedding(config: AgfConfig) -> AgfScaledWordEmbedding:
    scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
    return AgfScaledWordEmbedding(config.vocab_size, config.d_model, config.pad_token_id, embed_scale=scale)


class _AgfStack(AgfPreTrainedModel):
    """What the encoder and the decoder share: their layers and the position parameters they may own for all of
    them (`positions.shares_positions`)."""

    layers: nn.ModuleList

    def _shared_terms(self, modules: tuple, context: PositionContext) -> AttentionPositionTerms | None:
        """The terms of a stack's shared position parameters on `context`, evaluated once per forward for all its
        layers (None when the stack shares none)."""
        terms = position_terms(modules, context, self.config.pcmv)
        if terms is not None and self.training and torch.is_grad_enabled():
            for layer in self.layers:
                checkpoint_kwargs = getattr(getattr(layer, "_gradient_checkpointing_func", None), "keywords", {})
                if layer.gradient_checkpointing and checkpoint_kwargs.get("use_reentrant"):
                    # the terms reach the layers as data; reentrant checkpointing tracks only a layer's positional
                    # tensor arguments, and its backward then runs through the terms' graph once per layer (torch
                    # stops with "Trying to backward through the graph a second time")
                    # transformers 5.24 renamed gradient_checkpointing_enable
                    enable = "activation" if hasattr(self, "activation_checkpointing_enable") else "gradient"
                    raise ValueError(
                        "AGF: position parameters shared across layers (agf_share_across_layers or T5 bias) need "
                        f"non-reentrant gradient checkpointing (the default); call {enable}_checkpointing_enable() "
                        "without use_reentrant=True"
                    )
        return terms


class AgfEncoder(_AgfStack):
    """Transformer encoder: token embeddings (+ sinusoidal PE for the vanilla baseline) and `encoder_layers` blocks."""

    def __init__(self, config: AgfConfig):
        super().__init__(config)
        self.embed_tokens = _embedding(config)
        shared = shares_positions(config)
        self.position_encoding, self.value_coefficient = (
            position_modules(config, config.encoder_attention_heads, causal=False) if shared else (None, None)
        )
        self.layers = nn.ModuleList(
            [AgfEncoderLayer(config, layer_idx=i, share_positions=shared) for i in range(config.encoder_layers)]
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput | tuple:
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of `input_ids` and `inputs_embeds`")
        check_inputs(
            "AgfEncoder", input_ids, inputs_embeds, attention_mask, self.config.vocab_size, 0, self.config.d_model
        )
        if inputs_embeds is None:
            inputs_embeds = embed_ids(self.embed_tokens, input_ids, "AgfEncoder", self.config.vocab_size)
        batch, length = inputs_embeds.shape[:2]
        positions = positions_from_mask(attention_mask, batch, length, inputs_embeds.device)
        hidden_states = add_absolute_positions(self.config, inputs_embeds, positions)
        hidden_states = F.dropout(hidden_states, p=self.config.dropout, training=self.training)
        mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
        )
        # computed once for every layer: the positions, RoPE angles and the terms of shared position parameters
        context = self_attention_context(self.config, positions, positions, self.config.encoder_attention_heads)
        shared_terms = self._shared_terms((self.position_encoding, self.value_coefficient), context)

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        for layer in self.layers:
            hidden_states, attn_weights = layer(hidden_states, mask, positions=context, shared_terms=shared_terms)
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_attentions += (attn_weights,)
        output = BaseModelOutput(
            last_hidden_state=hidden_states, hidden_states=all_hidden_states, attentions=all_attentions
        )
        return output


class AgfDecoder(_AgfStack):
    """Transformer decoder: causal self-attention with a KV cache, cross-attention over the encoder output."""

    def __init__(self, config: AgfConfig):
        super().__init__(config)
        self.embed_tokens = _embedding(config)
        heads = config.decoder_attention_heads
        shared = shares_positions(config)
        self.position_encoding, self.value_coefficient = (
            position_modules(config, heads, causal=True) if shared else (None, None)
        )
        self.cross_position_encoding, self.cross_value_coefficient = (
            position_modules(config, heads, causal=False, cross=True)
            if shares_positions(config, cross=True)
            else (None, None)
        )
        self.layers = nn.ModuleList(
            [AgfDecoderLayer(config, layer_idx=i, share_positions=shared) for i in range(config.decoder_layers)]
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions | tuple:
        """`attention_mask` is the 2D decoder padding mask over past + current tokens; with it, left-padded decoder
        prompts get their real positions. Without it positions continue from the cache length. `position_ids`
        override the query positions (keys then take them too when there is no cache)."""
        cache = merge_cache_kwargs(cache, past_key_values, f"{type(self).__name__}.forward")
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if self.training and any(layer.gradient_checkpointing for layer in self.layers):
            # recomputing a layer in backward would append its keys to the cache a second time
            use_cache = False
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of decoder `input_ids` and `inputs_embeds`")
        given_past = cache.get_seq_length() if use_cache and cache is not None else 0
        check_inputs(
            "AgfDecoder",
            input_ids,
            inputs_embeds,
            attention_mask,
            self.config.vocab_size,
            given_past,
            self.config.d_model,
        )
        if inputs_embeds is None:
            inputs_embeds = embed_ids(self.embed_tokens, input_ids, "AgfDecoder", self.config.vocab_size)
        batch, q_len = inputs_embeds.shape[:2]
        device = inputs_embeds.device
        if position_ids is not None:
            check_position_ids("AgfDecoder", position_ids, batch, q_len)
        if encoder_hidden_states is not None and (
            encoder_hidden_states.dim() != 3 or encoder_hidden_states.shape[::2] != (batch, self.config.d_model)
        ):
            raise ValueError(
                f"AgfDecoder: the encoder output (`encoder_outputs` / `encoder_hidden_states`) must have shape "
                f"({batch}, source length, {self.config.d_model}), got {tuple(encoder_hidden_states.shape)}"
            )

        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        elif cache is not None and not isinstance(cache, EncoderDecoderCache):
            cache = EncoderDecoderCache(cache, DynamicCache(config=self.config))
        if not use_cache:
            cache = None
        self_cache = cache.self_attention_cache if cache is not None else None
        past_length = self_cache.get_seq_length() if self_cache is not None else 0

        if attention_mask is None:
            attention_mask = torch.ones(batch, past_length + q_len, dtype=torch.long, device=device)
        key_positions = positions_from_mask(attention_mask, batch, past_length + q_len, device)
        if position_ids is not None:
            query_positions = position_ids.to(device).expand(batch, q_len)
            key_positions = torch.cat([key_positions[:, :past_length], query_positions], dim=-1)
        else:
            query_positions = key_positions[:, past_length:]
        # a static cache hands every layer keys for all of its slots: the unused (masked) ones get positions too
        layers = getattr(self_cache, "layers", None) or [None]
        slots = getattr(layers[0], "max_cache_len", None)
        if slots is not None and slots > key_positions.shape[1]:
            unused = torch.arange(1, slots - key_positions.shape[1] + 1, device=device)
            key_positions = torch.cat([key_positions, key_positions[:, -1:] + unused], dim=-1)
        encoder_positions = None
        if encoder_hidden_states is not None:
            encoder_positions = positions_from_mask(
                encoder_attention_mask, batch, encoder_hidden_states.shape[1], device
            )

        hidden_states = add_absolute_positions(self.config, inputs_embeds, query_positions)
        hidden_states = F.dropout(hidden_states, p=self.config.dropout, training=self.training)

        causal_mask = create_causal_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask, **{CACHE_NAME: self_cache}
        )
        cross_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        # computed once for every layer: the positions, RoPE angles and the terms of shared position parameters
        heads = self.config.decoder_attention_heads
        context = self_attention_context(self.config, query_positions, key_positions, heads)
        shared_terms = self._shared_terms((self.position_encoding, self.value_coefficient), context)
        cross_context = cross_shared_terms = None
        if encoder_positions is not None:
            cross_context = cross_attention_context(self.config, query_positions, encoder_positions)
            cross_modules = (self.cross_position_encoding, self.cross_value_coefficient)
            cross_shared_terms = self._shared_terms(cross_modules, cross_context)

        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_self_attentions = () if output_attentions else None
        all_cross_attentions = () if output_attentions else None
        for layer in self.layers:
            hidden_states, self_weights, cross_weights = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,
                encoder_attention_mask=cross_mask,
                positions=context,
                cross_positions=cross_context,
                shared_terms=shared_terms,
                cross_shared_terms=cross_shared_terms,
                cache=cache,
            )
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_self_attentions += (self_weights,)
                all_cross_attentions += (cross_weights,)
        output = BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden_states,
            attentions=all_self_attentions,
            cross_attentions=all_cross_attentions,
            **{CACHE_NAME: cache},
        )
        return output


class AgfModel(AgfPreTrainedModel):
    """Encoder–decoder body without the LM head; `shared` is the one embedding of the shared vocabulary.

    Example:

    ```python
    >>> import torch
    >>> from plldr_hf import AgfConfig, AgfModel
    >>> config = AgfConfig(vocab_size=99, d_model=32, encoder_ffn_dim=37, decoder_ffn_dim=37, encoder_layers=2,
    ...                    decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4)
    >>> model = AgfModel(config).eval()
    >>> out = model(input_ids=torch.tensor([[5, 6, 7, 2]]), decoder_input_ids=torch.tensor([[1, 8]]))
    >>> tuple(out.last_hidden_state.shape)
    (1, 2, 32)

    ```
    """

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: AgfConfig):
        super().__init__(config)
        self.shared = _embedding(config)
        self.encoder = AgfEncoder(config)
        self.decoder = AgfDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.shared = value
        self.encoder.embed_tokens = value
        self.decoder.embed_tokens = value

    def get_encoder(self, modality: str | None = None) -> AgfEncoder:
        return self.encoder

    def get_decoder(self) -> AgfDecoder:
        return self.decoder

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput | tuple:
        cache = merge_cache_kwargs(cache, past_key_values, f"{type(self).__name__}.forward")
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            inputs_embeds=decoder_inputs_embeds,
            position_ids=decoder_position_ids,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **{CACHE_NAME: cache},
        )
        output = Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
            **{CACHE_NAME: decoder_outputs[CACHE_NAME] if CACHE_NAME in decoder_outputs else None},
        )
        return output


class AgfForConditionalGeneration(AgfPreTrainedModel, GenerationMixin):
    """AGF translation model with a tied LM head; trains with cross-entropy on unshifted labels, generates with
    greedy, sampling or beam search through `generate()`.

    Example:

    ```python
    >>> import torch
    >>> from plldr_hf import AgfConfig, AgfForConditionalGeneration
    >>> config = AgfConfig(vocab_size=99, d_model=32, encoder_ffn_dim=37, decoder_ffn_dim=37, encoder_layers=2,
    ...                    decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, pcmv=True)
    >>> model = AgfForConditionalGeneration(config)
    >>> batch = {"input_ids": torch.tensor([[5, 6, 7, 2]]), "labels": torch.tensor([[8, 9, 2]])}
    >>> loss = model(**batch).loss  # decoder inputs are the labels shifted right behind decoder_start_token_id
    >>> generated = model.eval().generate(batch["input_ids"], max_new_tokens=5, num_beams=2)

    ```
    """

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: AgfConfig):
        super().__init__(config)
        self.model = AgfModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.shared

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    def generate(self, *args, **kwargs):
        """`GenerationMixin.generate`. A trained translator's saved generation config bounds the output with
        `max_length` (so a plain `generate()` does not stop at transformers' 20-token default); a caller's
        `max_new_tokens` replaces that bound, instead of transformers warning that both are set."""
        if kwargs.get("max_new_tokens") is not None and "max_length" not in kwargs and not args[1:]:
            if kwargs.get("generation_config") is None:
                kwargs["max_length"] = None
        return super().generate(*args, **kwargs)

    def get_encoder(self, modality: str | None = None) -> AgfEncoder:
        return self.model.encoder

    def get_decoder(self) -> AgfDecoder:
        return self.model.decoder

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        cache: Cache | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput | tuple:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            Target ids aligned with the decoder outputs (not shifted again); -100 is ignored. Without
            `decoder_input_ids`, the decoder reads the labels shifted right behind `decoder_start_token_id`.
        num_items_in_batch (`int` or `torch.Tensor`, *optional*):
            Label tokens in the whole (accumulated, all-process) batch, passed by the Trainer: the summed loss is
            divided by it so gradient accumulation matches one large batch. Otherwise the mean over this batch's
            label tokens.
        """
        cache = merge_cache_kwargs(cache, past_key_values, f"{type(self).__name__}.forward")
        if labels is not None:
            use_cache = False
            source = input_ids if input_ids is not None else inputs_embeds
            if labels.dim() != 2 or (source is not None and labels.shape[0] != source.shape[0]):
                raise ValueError(
                    f"{type(self).__name__}: `labels` of shape {tuple(labels.shape)} for a batch of "
                    f"{source.shape[0] if source is not None else '?'} source rows; pass one (batch, target_length) "
                    "row of target ids per source row"
                )
            check_label_ids(type(self).__name__, "labels", labels, self.config.vocab_size)
            target = decoder_input_ids if decoder_input_ids is not None else decoder_inputs_embeds
            if target is not None and tuple(labels.shape) != tuple(target.shape[:2]):
                raise ValueError(
                    f"{type(self).__name__}: `labels` of shape {tuple(labels.shape)} for decoder inputs of shape "
                    f"{tuple(target.shape[:2])}; one label per decoder position (or pass labels alone)"
                )
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            decoder_position_ids=decoder_position_ids,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            **{CACHE_NAME: cache},
        )
        logits = self.lm_head(outputs.last_hidden_state)

        loss = None
        if labels is not None:
            labels = labels.to(logits.device)
            loss = F.cross_entropy(
                logits.float().view(-1, logits.shape[-1]),
                labels.view(-1),
                ignore_index=-100,
                reduction="sum",
                label_smoothing=self.config.label_smoothing,
            )
            if num_items_in_batch is None:
                num_items_in_batch = (labels != -100).sum().clamp(min=1)
            if isinstance(num_items_in_batch, torch.Tensor):
                num_items_in_batch = num_items_in_batch.to(loss.device)
            loss = loss / num_items_in_batch

        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
            **{CACHE_NAME: outputs[CACHE_NAME] if CACHE_NAME in outputs else None},
        )
        return output


__all__ = ["AgfPreTrainedModel", "AgfModel", "AgfForConditionalGeneration"]
