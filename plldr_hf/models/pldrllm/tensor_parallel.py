"""Tensor parallelism of PLDR-LLM: the q, k, v projections split by heads, and each rank's attention reads its own
heads' slice of the per-head PLGA tensors.

Transformers' plan (`PldrllmConfig.base_model_tp_plan`) shards the projections and the feed-forward network as for
Llama (`colwise` / `rowwise`, https://huggingface.co/docs/transformers/perf_infer_gpu_multi). PLGA adds tensors per
head that are not `nn.Linear` weights: W, b, P, a, b_a of `PldrllmPowerLawGraphLayer` (H, d, d) and a frozen G
(`past_G_values`, a buffer). They are small (5·H·d² per layer) and stay whole on every rank; the style
`pldrllm_heads` registered here, installed on each attention module, records which heads the rank holds
(`head_slice`), and the attention slices them. The metric learner is shared by the heads, so each rank runs it on its
own heads' Gram matrices only: G and its cost split by heads.

This file is remote code: it imports only torch and transformers.
"""

import torch


# `transformers.integrations.tensor_parallel` names the styles registry in every release this package supports (from
# 5.2x it re-exports `transformers.distributed`); a build without it has no tensor parallelism to join
try:
    from transformers.integrations.tensor_parallel import ALL_PARALLEL_STYLES, TensorParallelLayer
except ImportError:  # pragma: no cover
    ALL_PARALLEL_STYLES = TensorParallelLayer = None

HEADS_STYLE = "pldrllm_heads"


class HeadsParallel(TensorParallelLayer or object):
    """For a PLGA attention module whose `wq`, `wk`, `wv` are `colwise`: rank r of T holds heads
    [r·H/T, (r+1)·H/T) and reads those of its whole per-head tensors (`module.head_slice`)."""

    def install_forward(self, module: torch.nn.Module, mesh, **kwargs) -> torch.nn.Module:
        # transformers 5.25 also passes config= and mesh_manager=, which heads need not read
        ranks, rank = mesh.size(), mesh.get_local_rank()
        if module.num_heads % ranks:
            raise ValueError(
                f"tensor parallelism splits PLGA by heads: num_attention_heads={module.num_heads} is not divisible by "
                f"tp_size={ranks}; choose a tp_size that divides it"
            )
        local = module.num_heads // ranks
        module.head_slice = slice(rank * local, (rank + 1) * local)
        return module


if ALL_PARALLEL_STYLES is not None and torch.distributed.is_available() and HEADS_STYLE not in ALL_PARALLEL_STYLES:
    ALL_PARALLEL_STYLES.register(HEADS_STYLE, HeadsParallel())
