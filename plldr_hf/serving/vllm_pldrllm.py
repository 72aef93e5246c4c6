"""PLDR-LLM with a fixed G, written in vLLM's layers (paged KV cache, its rotary embedding, its attention backend).

The papers' inference mode (arXiv 2502.13502 §3, the G-cache): once G_LM is fixed per layer and head, Power Law
Graph Attention is scaled-dot-product attention on the query q' = q_rot·G_LM, so it runs on vLLM's own attention
with one extra (H, d, d) matmul per layer. That covers collapsed models (`PldrllmForCausalLM.collapse()`) and
folders with a predefined G (`custom_G_type`); both store G in the buffer `decoder.past_G_values` [L, 3, 1, H, d, d]
whose slot 2 is G_LM. A learned G (computed from each prompt by the metric learner) is kept per request as vLLM
keeps a Mamba layer's state (`vllm_g_state.py`): G_LM is computed at prefill from the request's whole prompt and read
at decode, and the model is then a hybrid of paged attention and per-request state in vLLM's eyes.

The layer layout mirrors `plldr_hf.models.pldrllm.modeling_pldrllm`, so checkpoint names load directly:

| HF name (`PldrllmForCausalLM`)                      | here                                           |
|-----------------------------------------------------|------------------------------------------------|
| `decoder.embedding`, scaled by √D, then `decoder.layernorm1` | `decoder.embedding`, `decoder.layernorm1` |
| `decoder.dec_layers.i.mha1.{wq,wk,wv}`              | `...mha1.qkv` (one fused projection)           |
| `decoder.dec_layers.i.mha1.dense`                   | `...mha1.dense`                                |
| `decoder.past_G_values[i, 2, 0]` (G_LM, H × d × d)  | `...mha1.g_lm` (fixed G)                       |
| `decoder.dec_layers.i.mha1.{layernorm1,reslayerAs,plgatt_layer}` | `...mha1.g_state.` the same (learned G) |
| `decoder.dec_layers.i.ffn.{gluw1,gluw2}`, `gluw3`   | `...ffn.gluw12` (fused), `...ffn.gluw3`        |
| `decoder.dec_layers.i.layernorm{1,2}` (post-LN)     | the same                                       |
| `final_layer` (untied, with bias)                   | `final_layer`                                  |

RoPE: `reference_rope=True` rotates interleaved pairs (x[2i], x[2i+1]) (vLLM's GPT-J style), otherwise the NeoX
halves. A fixed-G model skips the checkpoint's metric-learner weights.
"""

from collections.abc import Iterable

import torch
from torch import nn
from vllm.compilation.decorators import support_torch_compile
from vllm.config import VllmConfig
from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.layers.layernorm import LayerNorm
from vllm.model_executor.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.interfaces import HasInnerState, IsHybrid
from vllm.sequence import IntermediateTensors

from .vllm_g_state import STATE_COPY_FUNCS, STATE_DTYPES, PldrllmGState, state_shapes


# checkpoint tensors of the metric learner: under `g_state` for a learned G, skipped for a fixed G (G from `past_G_values`)
_METRIC_LEARNER = (".mha1.layernorm1.", ".mha1.reslayerAs.", ".mha1.plgatt_layer.")
# HF name part → (fused parameter here, shard)
_STACKED = ((".mha1.wq.", ".mha1.qkv.", "q"), (".mha1.wk.", ".mha1.qkv.", "k"), (".mha1.wv.", ".mha1.qkv.", "v"),
            (".ffn.gluw1.", ".ffn.gluw12.", 0), (".ffn.gluw2.", ".ffn.gluw12.", 1))  # fmt: skip


class PldrllmAttention(nn.Module):
    """PLGA: q, k rotated, q' = q·G_LM per head, then vLLM's causal attention over the paged cache. G_LM is a fixed
    parameter (`g_lm`) or each request's state (`g_state`)."""

    def __init__(self, config, cache_config=None, quant_config=None, prefix: str = ""):
        super().__init__()
        tp = get_tensor_model_parallel_world_size()
        heads, self.head_dim = config.num_attention_heads, config.head_dim
        if heads % tp:
            raise ValueError(f"PLDR-LLM: {heads} attention heads do not split over tensor parallel size {tp}")
        self.num_heads = heads // tp
        bias = config.attention_bias
        self.qkv = QKVParallelLinear(config.hidden_size, self.head_dim, heads, bias=bias, prefix=f"{prefix}.qkv")
        self.dense = RowParallelLinear(heads * self.head_dim, config.hidden_size, bias=bias, prefix=f"{prefix}.dense")
        self.rotary_emb = get_rope(
            self.head_dim,
            max_position=config.max_position_embeddings,
            is_neox_style=not config.reference_rope,
            rope_parameters={"rope_theta": config.rope_theta},
        )
        start = get_tensor_model_parallel_rank() * self.num_heads
        self.heads = slice(start, start + self.num_heads)  # this rank's heads
        if config.has_fixed_G:
            # G_LM of this rank's heads, (H_local, d, d); float32 like the PLGA maths of the transformers model
            self.g_lm = nn.Parameter(torch.empty(self.num_heads, self.head_dim, self.head_dim, dtype=torch.float32),
                                     requires_grad=False)  # fmt: skip
            self.g_lm.weight_loader = self._load_g
        else:
            self.g_state = PldrllmGState(config, self.heads, prefix=f"{prefix}.g_state")
        self.attn = Attention(
            self.num_heads,
            self.head_dim,
            self.head_dim**-0.5,
            cache_config=cache_config,
            quant_config=quant_config,
            prefix=f"{prefix}.attn",
        )
        backend = self.attn.attn_backend
        if not backend.supports_head_size(self.head_dim):
            # refused at load: otherwise the server starts and fails on its first request
            raise ValueError(
                f"PLDR-LLM: vLLM's {backend.get_name()} attention does not support head_dim={self.head_dim} "
                f"(supported: {backend.get_supported_head_sizes()}); serve this model with transformers instead "
                "(`plldr-hf serve`)"
            )

    def _load_g(self, param: nn.Parameter, g_all_heads: torch.Tensor) -> None:
        param.data.copy_(g_all_heads[self.heads].to(torch.float32))

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv(hidden_states)
        q, k, v = qkv.chunk(3, dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        if hasattr(self, "g_state"):
            projected = torch.empty_like(q)
            self.g_state(q, projected)  # q' = q_rot·G_LM of each token's request
            q = projected
        else:
            tokens = q.shape[0]
            q = q.view(tokens, self.num_heads, self.head_dim).transpose(0, 1).float()  # (H, T, d)
            q = torch.bmm(q, self.g_lm).transpose(0, 1).reshape(tokens, -1).to(v.dtype)  # q' = q_rot·G_LM
        output, _ = self.dense(self.attn(q, k, v))
        return output


class PldrllmGLU(nn.Module):
    """gluw3(silu(gluw1·x) ⊙ gluw2·x), with gluw1 and gluw2 fused into one projection."""

    def __init__(self, config, quant_config=None, prefix: str = ""):
        super().__init__()
        hidden, inner, bias = config.hidden_size, config.intermediate_size, config.glu_bias
        tp = get_tensor_model_parallel_world_size()
        if inner % tp:
            raise ValueError(f"PLDR-LLM: intermediate_size={inner} does not split over tensor parallel size {tp}")
        self.gluw12 = MergedColumnParallelLinear(hidden, [inner, inner], bias=bias, prefix=f"{prefix}.gluw12")
        self.gluw3 = RowParallelLinear(inner, hidden, bias=bias, prefix=f"{prefix}.gluw3")
        self.act = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up, _ = self.gluw12(x)
        out, _ = self.gluw3(self.act(gate_up))
        return out


class PldrllmDecoderLayer(nn.Module):
    """Post-LN: h = LN1(h + PLGA(h)); h = LN2(h + GLU(h))."""

    def __init__(self, config, cache_config=None, quant_config=None, prefix: str = ""):
        super().__init__()
        self.mha1 = PldrllmAttention(config, cache_config, quant_config, prefix=f"{prefix}.mha1")
        self.ffn = PldrllmGLU(config, quant_config, prefix=f"{prefix}.ffn")
        self.layernorm1 = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm2 = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.layernorm1(hidden_states + self.mha1(positions, hidden_states))
        return self.layernorm2(hidden_states + self.ffn(hidden_states))


# compiled by vLLM like its own models (Llama's decoder carries the same decorator), so the comparison is like for like
@support_torch_compile
class PldrllmModel(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        cache_config, quant_config = vllm_config.cache_config, vllm_config.quant_config
        self.config = config
        self.embedding = VocabParallelEmbedding(config.vocab_size, config.hidden_size, prefix=f"{prefix}.embedding")
        self.layernorm1 = LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dec_layers = nn.ModuleList(
            PldrllmDecoderLayer(config, cache_config, quant_config, prefix=f"{prefix}.dec_layers.{i}")
            for i in range(config.num_hidden_layers)
        )
        self.embed_scale = config.hidden_size**0.5

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden_states = inputs_embeds if inputs_embeds is not None else self.embed_input_ids(input_ids)
        hidden_states = self.layernorm1(hidden_states * self.embed_scale)
        for layer in self.dec_layers:
            hidden_states = layer(positions, hidden_states)
        return hidden_states


class PldrllmForCausalLM(nn.Module, HasInnerState, IsHybrid):
    """vLLM's PLDR-LLM: the decoder and the untied LM head `final_layer`.

    A hybrid in vLLM's sense only with a learned G (its per-request G state): the config's `layer_types` reads plain
    attention for a fixed G, and vLLM then treats the model as a plain transformer.
    """

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config: VllmConfig) -> tuple[tuple[int, ...]]:
        config = vllm_config.model_config.hf_config
        heads = config.num_attention_heads // vllm_config.parallel_config.tensor_parallel_size
        return state_shapes(heads, config.head_dim)

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: VllmConfig) -> tuple[torch.dtype]:
        return STATE_DTYPES

    @classmethod
    def get_mamba_state_copy_func(cls):
        return STATE_COPY_FUNCS

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        if not config.has_fixed_G:
            refuse_what_a_learned_g_cannot_take(vllm_config)
        rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
        if rope_type != "default":
            # this model builds vLLM's rotary embedding from rope_theta alone; a scaled table would be dropped
            raise ValueError(
                f"PLDR-LLM (vLLM): rope_parameters rope_type={rope_type!r} is not supported in vLLM yet; serve this "
                "model with transformers (plldr-hf serve) or without RoPE scaling"
            )
        self.config = config
        self.decoder = PldrllmModel(vllm_config=vllm_config, prefix=f"{prefix}decoder")
        self.final_layer = ParallelLMHead(
            config.vocab_size, config.hidden_size, bias=config.final_bias, prefix=f"{prefix}final_layer"
        )
        self.logits_processor = LogitsProcessor(config.vocab_size)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.decoder.embed_input_ids(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        positions: torch.Tensor,
        intermediate_tensors: IntermediateTensors | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.decoder(input_ids, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        # the head's bias is not applied by the head itself: LogitsProcessor adds it when passed (as vLLM's GPT-J does)
        return self.logits_processor(self.final_layer, hidden_states, self.final_layer.bias)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        fixed_g = self.config.has_fixed_G
        for name, tensor in weights:
            if name.endswith("past_G_values_status") or (name == "decoder.past_G_values" and not fixed_g):
                continue
            if any(part in name for part in _METRIC_LEARNER):
                if fixed_g:
                    continue
                name = name.replace(".mha1.", ".mha1.g_state.", 1)
            elif name == "decoder.past_G_values":  # [L, 3, 1, H, d, d]; slot 2 is G_LM
                for i, layer in enumerate(self.decoder.dec_layers):
                    layer.mha1.g_lm.weight_loader(layer.mha1.g_lm, tensor[i, 2, 0])
                    loaded.add(f"decoder.dec_layers.{i}.mha1.g_lm")
                continue
            shard = None
            for old, new, shard_id in _STACKED:
                if old in name:
                    name, shard = name.replace(old, new), shard_id
                    break
            if name not in params:
                raise ValueError(f"PLDR-LLM (vLLM): unexpected checkpoint tensor {name!r}")
            param = params[name]
            loader = getattr(param, "weight_loader", default_weight_loader)
            loader(param, tensor) if shard is None else loader(param, tensor, shard)
            loaded.add(name)
        missing = {n for n in params if n not in loaded}
        if missing:
            raise ValueError(f"PLDR-LLM (vLLM): the checkpoint lacks {sorted(missing)[:4]} (of {len(missing)})")
        if not fixed_g:
            for layer in self.decoder.dec_layers:
                layer.mha1.g_state.pack_weights()
        return loaded


def refuse_what_a_learned_g_cannot_take(vllm_config: VllmConfig) -> None:
    """Settings under which a learned G would be wrong, refused at load (`vllm_g_state.PldrllmVllmConfig` switches the
    defaults off when vLLM makes its config; this catches what reached the model anyway)."""
    settings = {
        "enable_chunked_prefill": vllm_config.scheduler_config.enable_chunked_prefill,
        "enable_prefix_caching": vllm_config.cache_config.enable_prefix_caching,
        "speculative_config": vllm_config.speculative_config is not None,
    }
    if any(settings.values()):
        on = ", ".join(name for name, value in settings.items() if value)
        raise ValueError(
            f"PLDR-LLM (vLLM): a learned G is computed from the whole prompt, which {on} would split or skip; "
            "serve with --no-enable-chunked-prefill --no-enable-prefix-caching and no speculative decoding, or "
            "collapse the model first (`plldr-hf collapse`)"
        )
