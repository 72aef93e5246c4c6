"""A learned G in vLLM: the G-cache of PLDR-LLM kept as per-request state (arXiv 2502.13502, the KV and G caches).

A learned-G model computes G_LM per layer and head from the Gram matrix of a request's rotated queries over its whole
prompt, and reuses it for every new token. vLLM keeps per-request state for Mamba-like layers: a `MambaBase` layer
declares its state's shape, vLLM allocates a slot per running request next to the paged KV cache, and the metadata of
the layer's state backend names each request's slot (`state_indices_tensor_p` for prefills, `_d` for decodes).
`PldrllmGState` is such a layer; its state is G_LM (H, d, d) in float32 for this rank's heads.

| step    | what `PldrllmGState` does                                                                          |
|---------|------------------------------------------------------------------------------------------------------|
| prefill | A0 = Σ_t q_tᵀ·q_t over the request's prompt → metric learner → G_LM, written to the request's slot |
| both    | q' = q·G_LM for each token, with its own request's G_LM                                            |
| decode  | G_LM read in place from the request's slot                                                          |

Speed (`benchmarks/vllm_learned_g.py`). At prefill the metric learner runs once over the d-wide rows of every
prefilled request's N·H Gram matrices, through vLLM's own CPU GEMM (oneDNN, weights packed once after loading, as
vLLM packs its linear layers): its d = 64 GEMMs are what bound a learned G on a CPU. At decode q' = q·G_LM is read
from the state in place: each output row is a q-weighted sum of G_LM's rows, one `embedding_bag` over the state's
rows, instead of gathering N·H·d·d floats per layer and step.

The maths is the transformers model's (`metric_learner`, `PldrllmResidualUnit`, `PldrllmPowerLawGraphLayer`), so the
checkpoint's metric-learner weights load under their own names. G depends on the whole prompt, hence
`PldrllmVllmConfig`: a prompt is prefilled in one step (chunked prefill off), prefix caching is off (a cached prefix would
skip its queries' share of A0), and speculative decoding is refused. A request that vLLM preempts for lack of KV-cache
blocks is recomputed from its prompt and the tokens generated so far, so its G then also covers those tokens; size the
cache (`gpu_memory_utilization`, `max_num_seqs`) so that vLLM logs no preemption.
"""

import torch
import torch.nn.functional as F
from torch import nn
from vllm.config import get_current_vllm_config
from vllm.forward_context import get_forward_context
from vllm.logger import init_logger
from vllm.model_executor.layers.mamba.abstract import MambaBase
from vllm.model_executor.layers.mamba.mamba_utils import get_temporal_copy_spec
from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
from vllm.model_executor.models.config import VerifyAndUpdateConfig
from vllm.platforms import current_platform
from vllm.utils.torch_utils import direct_register_custom_op
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum

from plldr_hf.models.pldrllm.fused_units import FUSED_BLOCK_ROWS, fused_params, units_in_blocks
from plldr_hf.models.pldrllm.modeling_pldrllm import metric_learner
from plldr_hf.models.pldrllm.plga import PldrllmPowerLawGraphLayer, PldrllmResidualUnit, gram_matrix


logger = init_logger(__name__)

WHOLE_PROMPT = "a learned G is computed from the whole prompt"
# the state of one layer and request: G_LM of the rank's heads, float32 like the PLGA maths of the transformers model
STATE_DTYPES = (torch.float32,)


def state_shapes(heads: int, head_dim: int) -> tuple[tuple[int, ...]]:
    return ((heads, head_dim, head_dim),)


def _with_vllm_gemm(layer: nn.Linear) -> nn.Linear:
    """`layer`, given the CPU GEMM vLLM picks for its own linear layers (oneDNN with the weight packed once)."""
    dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
    return layer


def _packed_linear(x: torch.Tensor, layer: nn.Linear, bias: torch.Tensor | None) -> torch.Tensor:
    """x·Wᵀ + b through the GEMM vLLM chose for `layer` (`_with_vllm_gemm`)."""
    return layer.cpu_linear(x, layer.weight, bias)


def in_place_rows(states: torch.Tensor, slots: torch.Tensor, offsets: torch.Tensor):
    """The state (slots, H, d, d) as a table of d-wide rows and, for each slot in `slots` (N,), the indices (N·H, d)
    of its G_LM rows per head; None when the state's layout has no such view (then gather instead). `offsets` is
    `torch.arange(H·d)`, the rows of one slot."""
    d = states.shape[-1]
    if states.stride()[1:] != (d * d, d, 1) or states.stride(0) % d:
        return None
    slot_rows = states.stride(0) // d
    table = torch.as_strided(states, ((states.shape[0] - 1) * slot_rows + offsets.numel(), d), (d, 1))
    return table, (slots.view(-1, 1) * slot_rows + offsets).view(-1, d)


class PldrllmVllmConfig(VerifyAndUpdateConfig):
    """What a PLDR-LLM folder needs from vLLM's settings, checked and applied when vLLM makes an engine's config
    (vLLM's per-architecture hook, registered for this package's model and for vLLM's Transformers backend)."""

    @classmethod
    def verify_and_update_config(cls, vllm_config) -> None:
        config = vllm_config.model_config.hf_config
        if getattr(config, "model_type", None) != "pldrllm":
            return
        if vllm_config.model_config.architecture != "PldrllmForCausalLM":
            cls.refuse_what_the_transformers_backend_drops(config)
        elif not config.has_fixed_G:
            cls.serve_a_learned_g(vllm_config)

    @staticmethod
    def refuse_what_the_transformers_backend_drops(config) -> None:
        # vLLM's Transformers backend (model_impl="transformers") runs the transformers model with vLLM's attention:
        # it loads an LM-head bias only when the checkpoint names it `lm_head.bias`, and it has no place for the G cache
        fix = "serve with vLLM's default model_impl (this package's vLLM model)"
        if not config.has_fixed_G:
            raise ValueError(
                f"PLDR-LLM (vLLM): vLLM's Transformers backend cannot keep a learned G per request; {fix}"
            )
        if config.final_bias:
            raise ValueError(
                "PLDR-LLM (vLLM): vLLM's Transformers backend would drop the LM head's bias (`final_layer.bias`: it "
                f"loads a head bias only under the name `lm_head.bias`); {fix}"
            )

    @staticmethod
    def serve_a_learned_g(vllm_config) -> None:
        if vllm_config.speculative_config is not None:
            raise ValueError(
                f"PLDR-LLM (vLLM): speculative decoding (speculative_config) is not supported with a learned G: "
                f"{WHOLE_PROMPT} and a draft's rejected tokens would enter it. Serve without speculative_config, or "
                "collapse the model first (`plldr-hf collapse`)."
            )
        scheduler, cache = vllm_config.scheduler_config, vllm_config.cache_config
        if scheduler.enable_chunked_prefill:
            logger.warning("PLDR-LLM with a learned G: chunked prefill (enable_chunked_prefill) switched off, %s.",
                           WHOLE_PROMPT)  # fmt: skip
            scheduler.enable_chunked_prefill = False
            scheduler.long_prefill_token_threshold = 0
            max_len = vllm_config.model_config.max_model_len
            scheduler.max_num_batched_tokens = max(scheduler.max_num_batched_tokens, max_len)
        if cache.enable_prefix_caching:
            logger.warning("PLDR-LLM with a learned G: prefix caching (enable_prefix_caching) switched off, %s.",
                           WHOLE_PROMPT)  # fmt: skip
            cache.enable_prefix_caching = False


class PldrllmGState(MambaBase, nn.Module):
    """One layer's metric learner and PLGA tensors, and its per-request G_LM: `forward(q, out)` writes q' = q·G_LM.

    `q` and `out` are (tokens, H·d) for this rank's H heads. The state backend is vLLM's short-convolution one: its
    metadata (prefill token offsets, state slots, decode slots) is all a whole-state layer needs.
    """

    def __init__(self, config, heads: slice, prefix: str):
        super().__init__()
        self.num_heads, self.head_dim = heads.stop - heads.start, config.head_dim
        self.heads = heads
        self.layernorm1 = nn.LayerNorm(self.head_dim, eps=config.layer_norm_eps)
        self.reslayerAs = nn.ModuleList(
            PldrllmResidualUnit(self.head_dim, config.A_dff, config.num_denseA, config.glu_bias, config.layer_norm_eps)
            for _ in range(config.num_reslayerA)
        )
        self.plgatt_layer = PldrllmPowerLawGraphLayer(config.num_attention_heads, self.head_dim)
        for param in self.parameters():
            param.requires_grad_(False)
        self.run_units = None  # the residual units on vLLM's GEMM, for `metric_learner` (`pack_weights`)
        self.register_buffer("row_offsets", torch.arange(self.num_heads * self.head_dim), persistent=False)
        vllm_config = get_current_vllm_config()
        forward_context = vllm_config.compilation_config.static_forward_context
        if prefix in forward_context:
            raise ValueError(f"Duplicate layer name: {prefix}")
        forward_context[prefix] = self
        self.prefix = prefix
        self.kv_cache = (torch.tensor([]),)

    # --- what vLLM asks a state layer ---
    def get_state_shape(self) -> tuple[tuple[int, ...]]:
        return state_shapes(self.num_heads, self.head_dim)

    def get_state_dtype(self) -> tuple[torch.dtype]:
        return STATE_DTYPES

    @property
    def mamba_type(self) -> MambaAttentionBackendEnum:
        return MambaAttentionBackendEnum.SHORT_CONV

    def pack_weights(self) -> None:
        """After loading: on a CPU, the metric learner's linear layers get vLLM's CPU GEMM (oneDNN with the weights
        packed once), in float32 like the transformers model's metric learner; elsewhere torch's GEMMs serve."""
        if not current_platform.is_cpu():
            return
        self.layernorm1.float()
        self.reslayerAs.float()
        params = fused_params(self.reslayerAs, weight=_with_vllm_gemm)
        per_unit, eps = len(params) // len(self.reslayerAs), self.reslayerAs[0].layernormA.eps

        def run_units(block: torch.Tensor) -> torch.Tensor:  # the units on the rows of a block of matrices (…, d, d)
            rows = block.reshape(-1, self.head_dim)
            return units_in_blocks(rows, params, per_unit, FUSED_BLOCK_ROWS, eps, None, _packed_linear)[0].view(
                block.shape
            )

        self.run_units = run_units

    # --- the maths ---
    def g_of(self, prompts: list[torch.Tensor]) -> torch.Tensor:
        """G_LM (N, H, d, d) of N prompts, each given by its queries (T_i, H, d); the metric learner runs once, over
        the rows of all N·H Gram matrices."""
        # each prompt's Gram matrix as the transformers model computes it: (N, H, d, d)
        a0 = torch.cat([gram_matrix(q.transpose(0, 1)[None]) for q in prompts])
        a = metric_learner(a0, self.layernorm1, self.reslayerAs, run_units=self.run_units)
        return self.plgatt_layer(a, self.heads).g_lm

    def project_decodes(self, q: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """q' = q·G_LM (N, H, d) of N decode tokens q (N, H, d), each with the G_LM of its request's state slot."""
        (states,) = self.kv_cache
        view = in_place_rows(states, slots, self.row_offsets)
        if view is None:
            logger.warning_once(
                "PLDR-LLM with a learned G: the G state's layout %s has no in-place row view; each decode step "
                "gathers its requests' G_LM instead (slower).",
                tuple(states.stride()),
            )
            return torch.matmul(q[:, :, None, :], states[slots])[:, :, 0]
        table, rows = view
        # row (i, h) of the output: Σ_j q[i, h, j]·G_LM[slot_i, h, j, :], read from the state where it lies
        weights = q.reshape(-1, self.head_dim)
        return F.embedding_bag(rows, table, per_sample_weights=weights, mode="sum").view(q.shape)

    def forward(self, q: torch.Tensor, out: torch.Tensor) -> None:
        torch.ops.vllm.pldrllm_g_state(q, out, self.prefix)

    def forward_native(self, q: torch.Tensor, out: torch.Tensor) -> None:
        metadata = get_forward_context().attn_metadata
        metadata = metadata.get(self.prefix) if isinstance(metadata, dict) else None
        tokens = q.shape[0]
        q = q.view(tokens, self.num_heads, self.head_dim).float()
        # q' is written into `out` (tokens, H, d) request by request: no concatenation, one copy per token
        out = out.view(tokens, self.num_heads, self.head_dim)
        if metadata is None:  # vLLM's profiling run: any G of the right cost will do
            out.copy_(torch.matmul(q.transpose(0, 1), self.g_of([q])[0]).transpose(0, 1))
            return
        (states,) = self.kv_cache  # (slots, H, d, d)
        decodes, prefill_tokens = metadata.num_decode_tokens, metadata.num_prefill_tokens
        if decodes:  # vLLM orders a batch's decodes first
            out[:decodes] = self.project_decodes(q[:decodes], metadata.state_indices_tensor_d.flatten()[:decodes])
        if prefill_tokens:
            if metadata.has_initial_states_p is not None and bool(metadata.has_initial_states_p.any()):
                raise RuntimeError(
                    f"PLDR-LLM (vLLM): a prompt was prefilled in parts, but {WHOLE_PROMPT}; switch chunked prefill "
                    "and prefix caching off (--no-enable-chunked-prefill --no-enable-prefix-caching)"
                )
            bounds = (decodes + metadata.query_start_loc_p).tolist()
            spans = list(zip(bounds[:-1], bounds[1:]))
            g = self.g_of([q[start:end] for start, end in spans])
            states[metadata.state_indices_tensor_p.flatten()[: len(spans)]] = g
            for (start, end), g_i in zip(spans, g):
                out[start:end] = torch.matmul(q[start:end].transpose(0, 1), g_i).transpose(0, 1)


def pldrllm_g_state(q: torch.Tensor, out: torch.Tensor, layer_name: str) -> None:
    get_forward_context().no_compile_layers[layer_name].forward_native(q, out)


def _fake(q: torch.Tensor, out: torch.Tensor, layer_name: str) -> None:
    return None


# an opaque op, so that a compiled model (vLLM's `support_torch_compile`) calls the state layer at run time with the
# step's metadata, as vLLM's own state layers do
direct_register_custom_op(op_name="pldrllm_g_state", op_func=pldrllm_g_state, mutates_args=["out"], fake_impl=_fake)

STATE_COPY_FUNCS = (get_temporal_copy_spec,)
