"""PLDR-LLM: a decoder-only LM with Power Law Graph Attention (PLGA), in the released checkpoint format.

Papers: arXiv 2410.16703 (PLDR-LLM), 2502.13502 (KV-cache + G-cache), 2603.23539 (self-organised criticality).
This file implements the v51 ("v510") architecture of the reference code.

Notable features (what differs from a standard decoder):
- Per layer and head a "metric learner" maps the Gram matrix of the rotated queries, A0 = q_rotᵀ·q_rot over all S
  positions of the call (no mask, no 1/S), to a d×d operator G_LM; scores are (q_rot·G_LM)·k_rotᵀ/√d. G_LM = I is
  exactly scaled-dot-product attention, so any stock kernel runs PLGA with the query q' = q_rot·G_LM.
- Post-LN layers, GLU feed-forward, biases on every Linear, embeddings scaled by √D then LayerNorm, no final norm,
  untied LM head `final_layer` with bias.
- Two RoPE conventions selected by `reference_rope`: interleaved pairs (v51/SOC) or NeoX `rotate_half` (v52).
- The PLGA maths (Gram matrix, metric learner, power law, G) runs in float32 whatever the model dtype.
- G-cache (reference semantics): with a cache, each layer computes G from the prompt at prefill and reuses it for
  every decode step; without a cache G is recomputed from the whole input. The state lives in the cache layer
  (`PldrllmCacheLayer`), so it follows beam reordering; `cache_first_G` keeps only batch row 0's G.
- Fixed G: `custom_G_type` (v51G ablation) or a collapsed model keep one G per layer and head in the persistent
  buffer `decoder.past_G_values` [L, 3, 1, H, d, d] (slots A, A_LM, G_LM); the metric learner is skipped.
- The DAG regulariser on A_LM, A_P, G_LM is computed from each layer's state (`dag_terms`; the state is made from
  the PLGA tensors as `plgatt_layer` reads them, so PEFT adapters on them count) and added to the loss with the
  token-fraction weight that keeps gradient accumulation and DDP exact (each sequence weighted by its share of the
  batch's label tokens, as Trainer's `num_items_in_batch` weights the cross-entropy).

The model is split by concern into sibling files that `save_pretrained` copies with this one (remote code):

| file               | what it holds                                                                          |
|--------------------|----------------------------------------------------------------------------------------|
| `plga.py`          | the PLGA maths as pure functions (`gram_matrix`, `power_law_graph`, `dag_terms`, …), the |
|                    | `PlgaState` / `PlgaCall` records and the metric learner's modules (the reference path)  |
| `fused_units.py`   | the metric learner's residual units fused with a hand-written backward (CPU fast path)  |
| `dag.py`           | the DAG value |ln(tr(e^{M∘M})/d)| and its overflow-safe matrix exponential             |
| `collapse.py`      | calibration inputs, order parameters and `collapse_model` behind `collapse()`           |
| `layout.py`        | `call_layout`: one call's positions, mask, packed sequences and `PlgaCall`              |
| `inputs.py`        | the checks of what a call is given (ids, embeddings, positions, labels, DAG weights)    |
| `g_cache.py`       | the G-cache layer `PldrllmCacheLayer` (G from the prompt, reused at every decode step)  |
| `outputs.py`       | the output records (stock fields plus the PLGA tensors and the DAG terms)              |
| `tensor_parallel.py` | `tp_plan="auto"`: the style that gives each rank's attention its heads (`head_slice`)  |
| this file          | RoPE, attention, decoder layer, models and heads                                        |

`PldrllmAttention` chooses where the state comes from: the fixed-G buffer, the G-cache, or `deductive_outputs` (the
learned path, through `metric_learner`, which picks the fused units or the modules); `PlgaCall` carries what one
forward call tells every layer (padding weights, packed sequences, DAG form).

Symbol table (paper → meaning → released name):

| symbol   | meaning                                          | shape        | released name                       |
|----------|--------------------------------------------------|--------------|-------------------------------------|
| Wq,Wk,Wv | query/key/value projections                      | [D, D] + [D] | `mha1.wq`, `mha1.wk`, `mha1.wv`     |
| Wo       | output projection                                | [D, D] + [D] | `mha1.dense`                        |
| γ, β     | LayerNorm over the rows of the Gram matrix A0    | [d]          | `mha1.layernorm1`                   |
| GLU, LN  | residual metric-learner units (R units × n GLUs) | d→a→d        | `mha1.reslayerAs.r.denseAs.k.gluw*` |
| W, b     | A_LM = iSwiGLU(W·A + b) + ε                      | [H, d, d]    | `plgatt_layer.Wlst`, `.blst`        |
| P        | power-law exponents, A_P = A_LM^∘P               | [H, d, d]    | `plgatt_layer.pwlst`                |
| a, b_a   | G_LM = a·A_P + b_a                               | [H, d, d]    | `plgatt_layer.alst`, `.balst`       |
| A        | metric tensor (metric-learner output)            | [B, H, d, d] | `pldr_attentions[l][0]`             |
| A_LM     | positive operator                                | [B, H, d, d] | `pldr_attentions[l][1]`             |
| A_P      | power-law operator                               | [B, H, d, d] | `pldr_attentions[l][2]`             |
| G_LM     | learned bilinear form of the scores              | [B, H, d, d] | `pldr_attentions[l][3]`             |

This file and its siblings are copied next to the weights by `save_pretrained` (remote code): they import only
torch, transformers (public names) and each other.
"""

import copy
import functools
import inspect
import math
import os
import warnings

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import (
    GenericForQuestionAnswering,
    GenericForSequenceClassification,
    GenericForTokenClassification,
    GradientCheckpointingLayer,
)
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import can_return_tuple, logging
from transformers.utils.generic import merge_with_config_defaults

from .collapse import PldrllmCollapseReport, collapse_model, own_config
from .configuration_pldrllm import PldrllmConfig, check_buildable
from .fused_units import fused_units, is_plain
from .g_cache import PldrllmCacheLayer, install_g_cache_layers
from .inputs import check_inputs, check_lm_labels, dag_weights_of, embed_ids
from .layout import call_layout
from .outputs import PldrllmCausalLMOutput, PldrllmModelOutput
from .plga import (
    PldrllmGLU,
    PldrllmPowerLawGraphLayer,
    PldrllmResidualUnit,
    PlgaCall,
    PlgaState,
    dag_terms,
    float32_region,
    gram_matrix,
    layer_norm_fp32,
    metric_learner_modules,
    present_segments,
    residual_units,
)


logger = logging.get_logger(__name__)

CONTINUOUS_BATCHING_NEEDS_FIXED_G = (
    "transformers' continuous batching (generate_batch, cache_implementation='paged', transformers serve) packs "
    "several requests into one row of a paged cache; a learned G would need each request's own G kept next to its "
    "keys and values, which that cache does not hold. Collapse the model first (model.collapse(), or plldr-hf "
    "collapse): with a fixed G it runs as SDPA on q' = q·G and batches continuously. For a learned G use "
    "model.generate() on a left-padded batch."
)


def is_paged(cache) -> bool:
    """Whether `cache` is transformers' paged cache (by name: older transformers versions lack its module)."""
    return type(cache).__name__ == "PagedAttentionCache"


# version shim: transformers 5.24 renamed the cache keyword and output field `past_key_values` -> `cache` (5.23 knows
# only `past_key_values`; the old name is deprecated until 5.40). Forward signatures accept both spellings; the mask
# helpers and the output dataclasses get the installed one. The remote code of each family carries this shim and the
# input checks below as marked copies (tests/test_copies.py keeps them equal).
# Copied from plldr_hf.models.agf.modeling_agf.CACHE_NAME
CACHE_NAME = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"
# the paged cache contract this model follows (the model writes the cache, the attention function reads it) is that of
# transformers >= 5.24, which also renamed the cache keyword; before, the paged attention functions wrote the cache
# themselves, and transformers' eager one then stopped and returned nothing for every request
CONTINUOUS_BATCHING_SUPPORTED = CACHE_NAME == "cache"
CONTINUOUS_BATCHING_NEEDS_TRANSFORMERS = (
    "continuous batching of PLDR-LLM (generate_batch, cache_implementation='paged', transformers serve) needs "
    "transformers >= 5.24; upgrade transformers, or use model.generate() on a left-padded batch"
)


def check_continuous_batching(config: PldrllmConfig) -> None:
    """Refuse transformers' continuous batching where it cannot run: below transformers 5.24, or with a learned G.
    Called before generating (`init_continuous_batching`) and by any forward that receives a paged cache."""
    if not CONTINUOUS_BATCHING_SUPPORTED:
        raise NotImplementedError(CONTINUOUS_BATCHING_NEEDS_TRANSFORMERS)
    if not config.has_fixed_G:
        raise NotImplementedError(CONTINUOUS_BATCHING_NEEDS_FIXED_G)


# Copied from plldr_hf.models.agf.modeling_agf.merge_cache_kwargs
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


def rope_frequencies(config, head_dim: int, positions: torch.Tensor) -> tuple[torch.Tensor, float]:
    """RoPE inverse frequencies θ_i (d/2,) and the attention factor of `config.rope_parameters`'s type for one call's
    `positions`: plain RoPE θ_i = base^(−2i/d) (no `rope_parameters`, or type "default"), else transformers'
    initialisation function of the type (linear, dynamic NTK, YaRN, Llama 3), as Llama computes them. Dynamic NTK
    scaling reads the longest position of the call (outside torch.compile; compiled, the table length)."""
    params = getattr(config, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        base = params.get("rope_theta", config.rope_theta)
        return 1.0 / (base ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim)), 1.0
    seq_len = None
    if rope_type == "dynamic" and not torch.compiler.is_compiling():
        seq_len = int(positions.max()) + 1
    if getattr(config, "head_dim", None) != head_dim:
        config = copy.copy(config)
        config.head_dim = head_dim
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, positions.device, seq_len)
    return inv_freq.float(), float(attention_factor)


def rope_cos_sin(position_ids: torch.Tensor, config: PldrllmConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the RoPE angles p·θ_i (`rope_frequencies`) times the type's attention factor, in float32:
    (B, 1, S, d/2) each.

    Computed per call from the positions instead of a precomputed buffer, so loading from the meta device can never
    leave an uninitialised table (the NaN bug of the released remote code on transformers 5.x).
    """
    inv_freq, factor = rope_frequencies(config, config.head_dim, position_ids)
    angles = position_ids.float()[:, None, :, None] * inv_freq
    return angles.cos() * factor, angles.sin() * factor


def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """v51 / torchtune convention: rotate the pairs (x[2i], x[2i+1]) by p·θ_i; float32 maths, input dtype out."""
    x_pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = x_pairs[..., 0], x_pairs[..., 1]
    rotated = torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1)
    return rotated.flatten(-2).type_as(x)


def apply_rope_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """v52 / NeoX convention: rotate the pairs (x[i], x[i + d/2]), i.e. x·cos + rotate_half(x)·sin."""
    x_float = x.float()
    x1, x2 = x_float.chunk(2, dim=-1)
    cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    return (x_float * cos + torch.cat((-x2, x1), dim=-1) * sin).type_as(x)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference attention softmax(q·kᵀ·scaling + mask)·v with a float32 softmax; `query` is already q_rot·G.

    Accepts no mask, a boolean mask (True = attend) or an additive float mask. Returns (B, S, H, d) and the
    attention probabilities (B, H, S, T).
    """
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        attention_mask = attention_mask[:, :, :, : key.shape[-2]]
        if attention_mask.dtype == torch.bool:
            attn_weights = attn_weights.masked_fill(~attention_mask, torch.finfo(attn_weights.dtype).min)
        else:
            attn_weights = attn_weights + attention_mask
    attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value).transpose(1, 2).contiguous()
    return attn_output, attn_weights


def metric_learner(
    a0: torch.Tensor, layer_norm: nn.LayerNorm, units, *, recompute: bool = False, run_units=None, fused: bool = True
):
    """A = residual units(LN(A0)), float32, same shape as `a0` (…, d, d).

    Stock units run fused (`fused_units.py`, the default; `fused=False` calls the modules): `recompute=True` keeps
    only each GLU's d-wide input for backward and recomputes its a-wide activations there. Units with something
    wrapped around them (PEFT, hooks) are called as modules (`plga.metric_learner_modules`); `recompute=True` then
    checkpoints each block of matrices. Either way the values and gradients are those of the plain modules.
    `run_units(block)` replaces the eager units (a compiled `residual_units`)."""
    a = layer_norm_fp32(layer_norm, a0)
    if fused and run_units is None and is_plain(units):
        return fused_units(a.reshape(-1, a.shape[-1]), units, recompute).view(a.shape)
    return metric_learner_modules(a, units, recompute=recompute, run_units=run_units)


class PldrllmAttention(nn.Module):
    """Power Law Graph Attention of one layer (`mha1`).

    Learned G (`deductive_outputs`): the Gram matrix of the rotated queries goes through LayerNorm (`layernorm1`),
    the residual metric learner (`reslayerAs`) and the power-law step (`plgatt_layer`); with a cache it is computed
    at prefill and reused for every decode step. Fixed G (custom_G_type or collapsed): the state comes from the model
    buffer and none of that runs. Either way the backend gets q' = q_rot·G. `head_slice`: the heads it computes, all or
    one rank's under tensor parallelism (`tensor_parallel.py`).
    """

    head_slice = slice(None)

    def __init__(self, config: PldrllmConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        # read by the transformers attention backends
        self.is_causal = True
        self.num_key_value_groups = 1
        hidden, bias = config.hidden_size, config.attention_bias
        self.wq = nn.Linear(hidden, hidden, bias=bias)
        self.wk = nn.Linear(hidden, hidden, bias=bias)
        self.wv = nn.Linear(hidden, hidden, bias=bias)
        self.dense = nn.Linear(hidden, hidden, bias=bias)
        if config.custom_G_type is None:
            self.layernorm1 = nn.LayerNorm(self.head_dim, eps=config.layer_norm_eps, dtype=torch.float32)
            self.reslayerAs = nn.ModuleList(
                [
                    PldrllmResidualUnit(
                        self.head_dim, config.A_dff, config.num_denseA, config.glu_bias, config.layer_norm_eps
                    )
                    for _ in range(config.num_reslayerA)
                ]
            )
            self.plgatt_layer = PldrllmPowerLawGraphLayer(self.num_heads, self.head_dim)

    def deductive_outputs(self, q_rot: torch.Tensor, plga: PlgaCall) -> PlgaState:
        """The learned state from the rotated queries (B, H, S, d): tensors (B, H, d, d), or (B, K, H, d, d) for
        K packed sequences per row; `dag` (N, 3) with one row per sequence in (row, sequence) order."""
        batch, heads, _, d = q_rot.shape
        segments = plga.segment_ids
        a0 = gram_matrix(q_rot, plga.gram_weights, segments, plga.num_segments if segments is not None else 1)
        cfg = self.config
        recompute = cfg.metric_learner_checkpointing and self.training and torch.is_grad_enabled()
        run_units = self._compiled_units() if cfg.metric_learner_compile else None
        a = metric_learner(a0, self.layernorm1, self.reslayerAs, recompute=recompute, run_units=run_units)
        state = self.plgatt_layer(a, self.head_slice)
        dag = dag_terms(state, plga.dag_form) if plga.dag_form is not None else None  # (B or B·K, 3)
        if segments is None:
            return state._replace(dag=dag)
        k = plga.num_segments
        state = state.map(lambda t: t.view(batch, k, heads, d, d))
        if dag is not None:
            # slots past a shorter row's last sequence dropped
            state = state._replace(dag=dag.view(batch, k, 3)[present_segments(segments, k)])
        return state

    def _compiled_units(self):
        # built on first use and kept outside the module tree (no state-dict entries); keyed by the units it closes
        # over, so a deep copy of the model compiles its own instead of running the original's
        owner, compiled = self.__dict__.get("_compiled_residual_units", (None, None))
        if owner is not self.reslayerAs:
            compiled = torch.compile(functools.partial(residual_units, units=self.reslayerAs), dynamic=False)
            self.__dict__["_compiled_residual_units"] = (self.reslayerAs, compiled)
        return compiled

    def completed(self, state: PlgaState) -> PlgaState:
        """`state` with A_P filled in where it is not stored (fixed G): from A_LM and this layer's P when the learned
        tensors exist, else NaN (the released fixed-G format has no P)."""
        if state.a_p is not None:
            return state
        if getattr(self, "plgatt_layer", None) is None:
            return state._replace(a_p=torch.full_like(state.a_lm, float("nan")))
        return state._replace(a_p=self.plgatt_layer.power_law_of(state.a_lm, self.head_slice))

    def _learned_state(self, query: torch.Tensor, past_key_values, plga: PlgaCall):
        """(state, q' or None): the cached state on a decode step, else computed from this call (prefill or no
        cache; an empty KV cache means a new generation). q' is returned for packed rows, where each position
        uses its own sequence's G."""
        cache_layer = past_key_values.layers[self.layer_idx] if past_key_values is not None else None
        if cache_layer is not None and cache_layer.get_seq_length() > 0 and cache_layer.pldr_state is not None:
            return cache_layer.pldr_state, None
        state = self.deductive_outputs(query, plga)
        projected = None
        if plga.segment_ids is not None:
            segments = plga.segment_ids
            q_float = query.float()
            projected = torch.zeros_like(q_float)
            for k in range(plga.num_segments):
                member = (segments == k)[:, None, :, None].to(q_float.dtype)
                projected = projected + member * torch.matmul(q_float, state.g_lm[:, k])
            # the state that continues (cache, outputs): the last sequence of each row
            last = segments[:, -1]
            rows = torch.arange(query.shape[0], device=last.device)
            state = state.map(lambda t: t[rows, last])._replace(dag=state.dag)
        if cache_layer is not None:
            cache_layer.pldr_state = state.map(lambda t: t[:1]) if plga.cache_first_G else state._replace(dag=None)
        return state, projected

    def forward(
        self,
        hidden_states: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        fixed_g: torch.Tensor | None = None,
        plga: PlgaCall | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None, PlgaState]:
        batch, seq_len, _ = hidden_states.shape
        shape = (batch, seq_len, -1, self.head_dim)  # this rank's heads under tensor parallelism
        query = self.wq(hidden_states).view(shape).transpose(1, 2)  # (B, H, S, d)
        key = self.wk(hidden_states).view(shape).transpose(1, 2)
        value = self.wv(hidden_states).view(shape).transpose(1, 2)
        apply_rope = apply_rope_interleaved if self.config.reference_rope else apply_rope_half
        query, key = apply_rope(query, *rope), apply_rope(key, *rope)

        projected = None
        with float32_region(query.device.type):
            if fixed_g is not None:
                state = PlgaState.from_fixed_g(fixed_g[..., self.head_slice, :, :])
            else:
                state, projected = self._learned_state(query, past_key_values, plga or PlgaCall())
            if projected is None:
                projected = torch.matmul(query.float(), state.g_lm.float())  # q' = q_rot·G, (B, H, S, d)
        query = projected.to(value.dtype)

        if past_key_values is not None:
            if is_paged(past_key_values):
                # transformers' continuous batching: the paged cache writes and reads by the indices in `kwargs`
                key, value = past_key_values.update(key, value, self.layer_idx, kwargs=kwargs)
            else:
                key, value = past_key_values.update(key, value, self.layer_idx)

        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        attn_output, attn_weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            scaling=self.scaling,
            dropout=self.attention_dropout if self.training else 0.0,
            **kwargs,
        )
        attn_output = self.dense(attn_output.reshape(batch, seq_len, -1))
        return attn_output, attn_weights, state


class PldrllmDecoderLayer(GradientCheckpointingLayer):
    """Post-LN decoder layer.

    ```
    h ──┬─> mha1 (PLGA) ──(+)──> layernorm1 ──┬─> ffn (GLU) ──(+)──> layernorm2 ──> out
        └──────────────────┘                  └──────────────────┘
    ```
    """

    def __init__(self, config: PldrllmConfig, layer_idx: int):
        super().__init__()
        self.mha1 = PldrllmAttention(config, layer_idx)
        self.ffn = PldrllmGLU(config.hidden_size, config.intermediate_size, config.glu_bias)
        self.layernorm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, rope, attention_mask=None, **kwargs):
        attn_output, attn_weights, state = self.mha1(hidden_states, rope, attention_mask, **kwargs)
        hidden_states = self.layernorm1(hidden_states + attn_output)
        hidden_states = self.layernorm2(hidden_states + self.ffn(hidden_states))
        # the DAG values leave the layer as a tensor of their own: reentrant gradient checkpointing keeps autograd
        # links only for the top-level tensors a layer returns, not for tensors inside a returned tuple
        return hidden_states, attn_weights, state._replace(dag=None), state.dag


# Copied from plldr_hf.models.agf.modeling_agf.remember_local_folder
def remember_local_folder(model, pretrained_model_name_or_path):
    """Record a local folder's absolute path as `model.name_or_path`: PEFT writes it into an adapter's
    `base_model_name_or_path`, which must load from any working directory. Hub ids stay as given."""
    loaded = model[0] if isinstance(model, tuple) else model
    if isinstance(pretrained_model_name_or_path, (str, os.PathLike)) and os.path.isdir(pretrained_model_name_or_path):
        loaded.name_or_path = loaded.config.name_or_path = os.path.abspath(pretrained_model_name_or_path)
    return model


class PldrllmPreTrainedModel(PreTrainedModel):
    config_class = PldrllmConfig
    config: PldrllmConfig
    base_model_prefix = "decoder"
    supports_gradient_checkpointing = True
    _no_split_modules = ["PldrllmDecoderLayer"]
    # the metric learner and PLGA tensors: float32 under every quantizer (its skip list), and in float16 and bfloat16
    # loads (the strict list), so the PLGA maths keep the precision they run in
    _keep_in_fp32_modules = [r".*\.reslayerAs", r".*\.plgatt_layer", r".*\.mha1\.layernorm1"]
    _keep_in_fp32_modules_strict = _keep_in_fp32_modules
    _skip_keys_device_placement = ["past_key_values", "cache"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

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
        """Initialisation of the reference v510 code (SOC repository, with its 2026-02-25 `wv` fix).

        | parameter                                        | init                                   |
        |--------------------------------------------------|----------------------------------------|
        | every Linear weight (q, k, v, o, GLUs, LM head)   | Xavier-uniform                         |
        | every Linear bias                                | 0                                      |
        | embedding                                        | N(0, 1)                                |
        | LayerNorm weight / bias                          | 1 / 0                                  |
        | PLGA W (`Wlst`), P (`pwlst`), a (`alst`)         | Xavier-normal on (H, d, d), std ≈ 0.02 |
        | PLGA b (`blst`), b_a (`balst`)                   | 0                                      |
        | fixed G buffer `past_G_values` (identity/external)| slots A_LM, G_LM = I, A = 0           |
        | fixed G buffer (random)                          | A_LM, G_LM ~ N(0, 1), A = 0            |
        """
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=1.0)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, PldrllmPowerLawGraphLayer):
            for param in (module.Wlst, module.pwlst, module.alst):
                init.xavier_normal_(param)
            init.zeros_(module.blst)
            init.zeros_(module.balst)
        elif isinstance(module, PldrllmModel) and getattr(module, "past_G_values", None) is not None:
            init.copy_(module.past_G_values, module.initial_fixed_g())
            init.copy_(module.past_G_values_status, torch.ones_like(module.past_G_values_status))


class PldrllmModel(PldrllmPreTrainedModel):
    """The PLDR-LLM decoder (no LM head); in a causal-LM checkpoint it sits under the prefix `decoder`.

    Example:

    ```python
    >>> import torch
    >>> from plldr_hf import PldrllmConfig, PldrllmModel
    >>> config = PldrllmConfig(vocab_size=99, hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=37,
    ...                        num_hidden_layers=2, A_dff=8, num_reslayerA=2, max_position_embeddings=64)
    >>> out = PldrllmModel(config)(torch.tensor([[5, 6, 7]]), output_pldr_attentions=True)
    >>> out.last_hidden_state.shape, out.pldr_attentions[0][3].shape  # G_LM of layer 0: (B, H, d, d)
    (torch.Size([1, 3, 32]), torch.Size([1, 2, 16, 16]))
    ```
    """

    def __init__(self, config: PldrllmConfig):
        super().__init__(config)
        self.embedding = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layernorm1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dec_layers = nn.ModuleList([PldrllmDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        if config.has_fixed_G:
            self._register_fixed_g_buffers()
        self.gradient_checkpointing = False
        self.post_init()

    def _register_fixed_g_buffers(self, device: torch.device | None = None) -> None:
        # built on the default device: vLLM's Transformers backend puts only the parameters on "meta", not buffers
        cfg = self.config
        shape = (cfg.num_hidden_layers, 3, 1, cfg.num_attention_heads, cfg.head_dim, cfg.head_dim)
        self.register_buffer("past_G_values", torch.zeros(shape, device=device), persistent=True)
        self.register_buffer(
            "past_G_values_status",
            torch.zeros(cfg.num_hidden_layers, dtype=torch.bool, device=device),
            persistent=True,
        )

    def freeze_g(self, states: list[PlgaState]) -> None:
        """Keep one G per layer and head: each layer's (A, A_LM, G_LM), each (H, d, d) or (1, H, d, d), go into the
        persistent buffer `past_G_values` (L, 3, 1, H, d, d), the released fixed-G format; attention then uses it
        instead of the metric learner (the model's `collapse()` sets `config.collapsed` with it)."""
        if len(states) != self.config.num_hidden_layers:
            raise ValueError(f"freeze_g(): {len(states)} layer states for {self.config.num_hidden_layers} layers")
        self._register_fixed_g_buffers(self.embedding.weight.device)
        frozen = torch.stack(
            [torch.stack([s.a, s.a_lm, s.g_lm]).reshape(self.past_G_values.shape[1:]) for s in states]
        )
        self.past_G_values.copy_(frozen.to(self.past_G_values.dtype))
        self.past_G_values_status.fill_(True)

    def release_g(self) -> None:
        """Drop the frozen G (`freeze_g`); the learned weights were never changed."""
        del self.past_G_values
        del self.past_G_values_status

    def initial_fixed_g(self) -> torch.Tensor:
        """Initial value of `past_G_values` for `custom_G_type` (identity / external: G = I; random: N(0, 1))."""
        g = torch.zeros_like(self.past_G_values)
        d = self.config.head_dim
        if self.config.custom_G_type == "random":
            g[:, 1:] = torch.randn_like(g[:, 1:])
        else:
            g[:, 1:] = torch.eye(d, dtype=g.dtype, device=g.device)
        return g

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embedding = value

    @merge_with_config_defaults  # `use_cache` from the config, off under gradient checkpointing (as Llama's)
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_pldr_attentions: bool | None = None,
        cache_first_G: bool | None = None,
        output_dag_losses: bool = False,
        cache: Cache | None = None,
        **kwargs,
    ) -> PldrllmModelOutput | tuple:
        cfg = self.config
        past_key_values = merge_cache_kwargs(cache, past_key_values, f"{type(self).__name__}.forward")
        output_attentions = output_attentions if output_attentions is not None else cfg.output_attentions
        output_hidden_states = output_hidden_states if output_hidden_states is not None else cfg.output_hidden_states
        output_pldr_attentions = (
            output_pldr_attentions if output_pldr_attentions is not None else cfg.output_pldr_attentions
        )
        cache_first_G = cache_first_G if cache_first_G is not None else cfg.cache_first_G
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("PldrllmModel: pass exactly one of `input_ids` and `inputs_embeds`")

        fixed = cfg.has_fixed_G
        paged = is_paged(past_key_values)
        if paged:
            check_continuous_batching(cfg)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=cfg)
        if not use_cache and not paged:
            past_key_values = None
        if past_key_values is not None and not fixed:
            install_g_cache_layers(past_key_values, cfg.num_hidden_layers)
        # a paged cache (continuous batching) holds many requests; positions and the 4-D mask come with the call
        past_len = past_key_values.get_seq_length() if past_key_values is not None and not paged else 0
        check_inputs(
            type(self).__name__, input_ids, inputs_embeds, attention_mask, cfg.vocab_size, past_len, cfg.hidden_size
        )
        if inputs_embeds is None:
            inputs_embeds = embed_ids(self.embedding, input_ids, type(self).__name__, cfg.vocab_size)
        batch, seq_len = inputs_embeds.shape[:2]

        layout = call_layout(
            cfg,
            input_ids,
            attention_mask,
            position_ids,
            batch=batch,
            seq_len=seq_len,
            past_len=past_len,
            device=inputs_embeds.device,
            output_dag_losses=output_dag_losses,
            cache_first_G=cache_first_G,
            warn_unmasked=lambda ids: self.warn_if_padding_and_no_attention_mask(ids, None),
        )
        plga = layout.plga

        # not in place: the released HF port's in-place `*= sqrt(D)` also scaled the tensor returned as hidden_states[0]
        hidden_states = inputs_embeds * math.sqrt(cfg.hidden_size)
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        hidden_states = self.layernorm1(hidden_states)

        causal_mask = create_causal_mask(
            config=cfg,
            inputs_embeds=hidden_states,
            attention_mask=layout.attention_mask,
            position_ids=layout.position_ids,
            # transformers builds the block-diagonal mask of packed sequences only without a cache; a packed call
            # starts from an empty cache, so its mask does not depend on it
            **{CACHE_NAME: None if layout.packed else past_key_values},
        )
        rope = rope_cos_sin(layout.position_ids, cfg)

        if output_attentions and cfg._attn_implementation != "eager":
            # the fused kernels return no weights; say so instead of a silent tuple of None (as Llama does)
            logger.warning_once(
                f"`{cfg._attn_implementation}` attention does not return attention weights: `output_attentions=True` "
                "gives None per layer. Load the model with attn_implementation='eager' (or call "
                "model.set_attn_implementation('eager')) to get them."
            )
        all_attentions = () if output_attentions else None
        all_pldr = () if output_pldr_attentions else None
        dag_values = []
        for layer_idx, layer in enumerate(self.dec_layers):
            hidden_states, attn_weights, state, dag = layer(
                hidden_states,
                rope,
                causal_mask,
                past_key_values=past_key_values,
                fixed_g=self.past_G_values[layer_idx] if fixed else None,
                plga=plga,
                **kwargs,
            )
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_attentions += (attn_weights,)
            if output_pldr_attentions:
                all_pldr += (layer.mha1.completed(state).tensors(),)
            if dag is not None:
                dag_values.append(dag)

        dag_losses = torch.stack(dag_values).mean(0) if dag_values else None
        output = PldrllmModelOutput(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden_states,
            attentions=all_attentions,
            pldr_attentions=all_pldr,
            dag_losses=dag_losses,
            sequence_ids=plga.segment_ids if dag_losses is not None else None,
            **{CACHE_NAME: past_key_values},
        )
        return output


class PldrllmForCausalLM(PldrllmPreTrainedModel, GenerationMixin):
    """PLDR-LLM with its LM head `final_layer` (with bias), tied to the embedding only if `tie_word_embeddings`.

    Example:

    ```python
    >>> import torch
    >>> from plldr_hf import PldrllmConfig, PldrllmForCausalLM
    >>> config = PldrllmConfig(vocab_size=99, hidden_size=32, num_attention_heads=2, head_dim=16, intermediate_size=37,
    ...                        num_hidden_layers=2, A_dff=8, num_reslayerA=2, max_position_embeddings=64)
    >>> model = PldrllmForCausalLM(config).eval()
    >>> model.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=4, do_sample=False).shape
    torch.Size([1, 7])
    ```
    """

    _tied_weights_keys = {"final_layer.weight": "decoder.embedding.weight"}

    def __init__(self, config: PldrllmConfig):
        super().__init__(config)
        self.decoder = PldrllmModel(config)
        self.final_layer = nn.Linear(config.hidden_size, config.vocab_size, bias=config.final_bias)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.decoder.embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.decoder.embedding = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.final_layer

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.final_layer = value

    def init_continuous_batching(self, *args, **kwargs):
        """transformers' continuous batching (`generate_batch`, `generate(cache_implementation="paged")`,
        `transformers serve`), for a fixed G (collapsed or `custom_G_type`) only; a learned G is refused here, before
        anything is generated."""
        check_continuous_batching(self.config)
        return super().init_continuous_batching(*args, **kwargs)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_pldr_attentions: bool | None = None,
        cache_first_G: bool | None = None,
        output_dag_losses: bool | None = None,
        dag_weights: tuple[float, float, float] | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        cache: Cache | None = None,
        **kwargs,
    ) -> PldrllmCausalLMOutput | tuple:
        cfg = self.config
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        # labels already shifted by the caller (sequence / context parallelism splits the sequence before shifting)
        shift_labels = kwargs.pop("shift_labels", None)
        has_labels = labels is not None or shift_labels is not None
        given = input_ids if input_ids is not None else inputs_embeds
        check_lm_labels(type(self).__name__, labels, shift_labels, given, cfg.vocab_size)
        weights = dag_weights_of(type(self).__name__, dag_weights, cfg.dag_weights)
        # the one decision whether the DAG term enters the loss; the decoder computes the values when asked
        use_dag = has_labels and any(w > 0 for w in weights) and not cfg.has_fixed_G
        outputs = self.decoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=merge_cache_kwargs(cache, past_key_values, f"{type(self).__name__}.forward"),
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            output_pldr_attentions=output_pldr_attentions,
            cache_first_G=cache_first_G,
            output_dag_losses=use_dag or bool(output_dag_losses),
            return_dict=True,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.final_layer(hidden_states[:, slice_indices, :])

        loss = lm_loss = dag_loss = None
        per_sequence = outputs.dag_losses  # (N, 3) or None
        dag_losses = None if per_sequence is None else per_sequence.mean(0)
        if has_labels:
            lm_loss = self.loss_function(
                logits=logits,
                labels=labels,
                vocab_size=cfg.vocab_size,
                num_items_in_batch=num_items_in_batch,
                shift_labels=shift_labels,
            )
            if per_sequence is not None:
                tokens = self._label_tokens_per_sequence(labels, shift_labels, outputs.sequence_ids)
                tokens = tokens.to(per_sequence.dtype)  # (N,)
                dag_losses = (per_sequence * tokens[:, None]).sum(0) / tokens.sum().clamp(min=1)
            if use_dag:
                # Trainer sums micro-batch losses (gradient accumulation) and scales by the world size (DDP);
                # weighting each sequence by its label tokens over the same N as the CE keeps the DAG gradient
                # independent of how the batch is split
                total = tokens.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
                dag_loss = (per_sequence @ per_sequence.new_tensor(weights) * tokens).sum() / total
                loss = lm_loss + dag_loss.to(lm_loss.dtype)
            else:
                # a tensor of its own: Trainer scales the loss in place (DDP), which must not reach `lm_loss`
                loss = lm_loss.clone()

        output = PldrllmCausalLMOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            pldr_attentions=outputs.pldr_attentions,
            lm_loss=lm_loss,
            dag_loss=dag_loss,
            dag_losses=dag_losses,
            **{CACHE_NAME: outputs[CACHE_NAME] if CACHE_NAME in outputs else None},
        )
        return output

    @staticmethod
    def _label_tokens_per_sequence(labels, shift_labels, sequence_ids) -> torch.Tensor:
        """Label tokens of each sequence, in the order of the decoder's `dag_losses` rows: (B,), or (N,) for the
        sequences of a packed batch (`sequence_ids`)."""
        targets = shift_labels if shift_labels is not None else F.pad(labels[..., 1:], (0, 1), value=-100)
        counted = targets != -100  # (B, S): position s predicts a label token
        if sequence_ids is None:
            return counted.sum(-1)
        count = int(sequence_ids.max()) + 1
        member = F.one_hot(sequence_ids, count) * counted[..., None]  # (B, S, K)
        return member.sum(1)[present_segments(sequence_ids, count)]

    def collapse(
        self,
        calibration=None,
        tolerance: float = 1e-3,
        force: bool = False,
        tokenizer=None,
    ) -> PldrllmCollapseReport:
        """Freeze one constant G per layer and head after measuring that G is input-invariant (`collapse.py`).

        Runs the model on calibration inputs (None: a built-in set of seeded random sequences plus the empty prompt
        `[eos]` of the v510Gi recipe; a 2D id tensor or lists of ids, one sequence per row; or texts with
        `tokenizer`), measures how much A, A_LM, A_P and G_LM vary across them, and refuses with the numbers when
        G_LM's SOC order parameter exceeds `tolerance`, unless `force=True`. Then A, A_LM, G_LM of the first input
        (the reference of the measurement) go into the persistent buffer `decoder.past_G_values`, `config.collapsed`
        is set, and attention runs as SDPA with q' = q_rot·G: no Gram matrix, metric learner or power-law step.
        Merge LoRA adapters first.
        """
        return collapse_model(self, calibration, tolerance=tolerance, force=force, tokenizer=tokenizer)

    def uncollapse(self) -> "PldrllmForCausalLM":
        """Drop the frozen G and run the metric learner again (the learned weights were never changed)."""
        if not self.config.collapsed:
            raise ValueError("uncollapse(): the model is not collapsed")
        self.decoder.release_g()
        own_config(self)
        self.config.collapsed = False
        return self

    def to_fixed_g(self) -> "PldrllmForCausalLM":
        """A collapsed model in the released fixed-G format (`custom_G_type="external"`, G in `past_G_values`),
        without the metric learner and PLGA tensors: smaller, and loadable by the existing PLDR-LLM tooling.
        One way: keep the uncollapsed checkpoint for further training."""
        if not self.config.collapsed:
            raise ValueError("to_fixed_g(): collapse() the model first")
        config = copy.deepcopy(self.config)
        config.collapsed = False
        config.custom_G_type = "external"
        with torch.device("meta"):
            fixed = type(self)(config)
        state = self.state_dict()
        fixed.load_state_dict({k: state[k] for k in fixed.state_dict()}, strict=True, assign=True)
        fixed.generation_config = copy.deepcopy(self.generation_config)
        return fixed.train(self.training)


class PldrllmForSequenceClassification(GenericForSequenceClassification, PldrllmPreTrainedModel):
    """PLDR-LLM with the released sequence-classification head `score` (no bias) on the last token that is not
    `pad_token_id` (left or right padding alike), as in the released code: transformers' generic head."""

    base_model_prefix = "decoder"  # the released name, where the generic head says "model"


class PldrllmForTokenClassification(GenericForTokenClassification, PldrllmPreTrainedModel):
    """PLDR-LLM with the released token-classification head: dropout (`classifier_dropout`, default 0.1), `score`
    with bias: transformers' generic head."""

    base_model_prefix = "decoder"


class PldrllmForQuestionAnswering(GenericForQuestionAnswering, PldrllmPreTrainedModel):
    """PLDR-LLM with the released extractive question-answering head `qa_outputs` (2 logits per token, bias):
    transformers' generic head."""

    base_model_prefix = "decoder"

    # the generic head looks for `embed_tokens`; the released decoder calls its table `embedding`
    def get_input_embeddings(self) -> nn.Embedding:
        return self.decoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.decoder.set_input_embeddings(value)


__all__ = [
    "PldrllmPreTrainedModel",
    "PldrllmModel",
    "PldrllmForCausalLM",
    "PldrllmForSequenceClassification",
    "PldrllmForTokenClassification",
    "PldrllmForQuestionAnswering",
    "PldrllmCacheLayer",
    "PldrllmCollapseReport",
]
