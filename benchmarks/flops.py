"""FLOP bounds of the PLDR-LLM workloads, computed from the config: how much slower than an equal-size
Llama PLDR-LLM must be if every extra multiply-add ran at the speed of the model's own.

Counted: matrix products (2 FLOPs per multiply-add); elementwise work, norms and softmax are left out on both sides.
The main model is the same for both (same Linear shapes, attention over the same positions): per token
2·(Linear weights, LM head included), plus 4·S·D per layer for the attention scores and values of a full S × S
block. The PLDR-LLM extra per layer and sequence (`metric_learner_flops`):

| step | FLOPs |
|---|---|
| Gram matrix A0 = q_rotᵀ·q_rot | 2·S·d²·H |
| residual units: R units × n GLUs × 3 products on the d rows of each head's d×d matrix | 2·3·R·n·d·(d·a)·H |
| power law: W·A and a·A_P | 2·2·d³·H |
| q' = q_rot·G | 2·S·d²·H |

A training step is forward + backward ≈ 3 × forward; recomputing the metric learner's activations in backward (the
default) adds the two GLU pre-activation products of each unit's GLUs again, 2 of their 3 products.

These counts equal `torch.utils.flop_counter.FlopCounterMode`'s count of the real models' matrix products (tested;
torch counts no FLOPs for SDPA on a CPU, so the comparison leaves the attention term out on both sides).
`unit_gemm_shapes` lists the metric learner's products one by one, as the fused path makes them: the suite replays
them alone on random operands for its GEMM floor (what the metric learner would cost if its elementwise work, norms
and dispatch were free).
"""

from __future__ import annotations


def main_forward_flops(
    config, batch: int, length: int, context: int | None = None, *, logits: int | None = None, causal: bool = False
) -> float:
    """Forward FLOPs of the shared transformer body and LM head for `batch` × `length` new tokens attending to
    `context` positions (default: `length`; `causal` as in `attention_flops`), the LM head on `logits` positions
    (default: every new token; an engine that samples computes it only where it samples, `logits_to_keep=1` at a
    prefill)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    per_layer = 4 * hidden * hidden + 3 * hidden * config.intermediate_size  # q, k, v, o; three FFN products
    logits = batch * length if logits is None else logits
    body = batch * length * 2 * layers * per_layer
    return body + logits * 2 * hidden * config.vocab_size + attention_flops(config, batch, length, context, causal)


def attention_flops(config, batch: int, length: int, context: int | None = None, causal: bool = False) -> float:
    """The scores and values of every layer's attention: 4·context·D per new token and layer (a full block), or with
    `causal` 4·D per position a new token sees (the new tokens are the last `length` of the `context`, each sees
    those before it and itself, as a kernel that skips the masked part computes)."""
    context = length if context is None else context
    seen = length * (context - length) + length * (length + 1) // 2 if causal else length * context
    return batch * seen * 4 * config.hidden_size * config.num_hidden_layers


def metric_learner_flops(config, batch: int, length: int, *, projections: int | None = None) -> dict[str, float]:
    """Forward FLOPs of the PLDR-LLM's extra work for `batch` sequences of `length` tokens: `gram` (A0), `units`
    (the residual metric learner), `power_law` (A_LM, G_LM) and `projection` (q' = q_rot·G for `projections`
    tokens, default every token)."""
    heads, d, layers = config.num_attention_heads, config.head_dim, config.num_hidden_layers
    tokens = batch * length
    projections = tokens if projections is None else projections
    units = 2 * 3 * config.num_reslayerA * config.num_denseA * d * d * config.A_dff * heads
    return {
        "gram": layers * 2 * tokens * d * d * heads,
        "units": layers * batch * units,
        "power_law": layers * batch * 4 * d**3 * heads,
        "projection": layers * 2 * projections * d * d * heads,
    }


def training_bound(config, batch: int, length: int, recompute: bool) -> float:
    """(PLDR-LLM step) / (Llama step) FLOPs of forward + backward, with or without the recomputed units."""
    main = 3 * main_forward_flops(config, batch, length)
    extra = metric_learner_flops(config, batch, length)
    total_extra = 3 * sum(extra.values()) + (2 / 3 * extra["units"] if recompute else 0.0)
    return (main + total_extra) / main


def scoring_bound(config, batch: int, length: int) -> float:
    """Forward without cache: the metric learner once per layer and sequence."""
    main = main_forward_flops(config, batch, length)
    return (main + sum(metric_learner_flops(config, batch, length).values())) / main


def decode_bound(config, batch: int, prompt: int, new_tokens: int) -> float:
    """Greedy decoding with the KV + G cache: the metric learner runs at prefill only; every token is projected."""
    prefill = main_forward_flops(config, batch, prompt)
    steps = sum(main_forward_flops(config, batch, 1, context=prompt + t) for t in range(new_tokens))
    extra = metric_learner_flops(config, batch, prompt, projections=batch * (prompt + new_tokens))
    return (prefill + steps + sum(extra.values())) / (prefill + steps)


def serving_flops(config, prompts: list[int], new_tokens: int) -> dict[str, float]:
    """FLOPs of serving one batch of requests, prompts of the given lengths, `new_tokens` greedy tokens each, as a
    serving engine (vLLM) runs it, by part: each prompt prefilled once with the LM head at its last position only and
    causal attention, then `new_tokens - 1` decode steps, each attending to the prompt and the tokens so far.
    `linear` (the body's and the LM head's products), `attention` and `projection` (q_rot·G of every token) are the
    work of both a collapsed and a learned G; `gram`, `units` and `power_law`, once per request and layer, a learned
    G's alone."""
    parts = dict.fromkeys(("linear", "attention", "projection", "gram", "units", "power_law"), 0.0)
    for prompt in prompts:
        for length, context in [(prompt, prompt), *((1, prompt + t) for t in range(1, new_tokens))]:
            attention = attention_flops(config, 1, length, context, causal=True)
            parts["attention"] += attention
            parts["linear"] += main_forward_flops(config, 1, length, context, logits=1, causal=True) - attention
        for name, value in metric_learner_flops(config, 1, prompt, projections=prompt + new_tokens - 1).items():
            parts[name] += value
    return parts


def serving_bound(config, prompts: list[int], new_tokens: int) -> float:
    """(collapsed) / (learned G) FLOPs of serving one batch (`serving_flops`): a ratio ≤ 1, the most a learned G's
    throughput can reach of the collapsed model's."""
    parts = serving_flops(config, prompts, new_tokens)
    collapsed = parts["linear"] + parts["attention"] + parts["projection"]
    return collapsed / (collapsed + parts["gram"] + parts["units"] + parts["power_law"])


def unit_gemm_shapes(config, batch: int, *, backward: bool, recompute: bool, block: int) -> list[tuple[int, int, int]]:
    """(m, k, n) of every matrix product the fused residual units make for `batch` sequences, per layer and block of
    `block` rows (`FUSED_BLOCK_ROWS`; each head's d×d matrix is d rows): per GLU forward W1·x, W2·x (d → a) and
    W3·p (a → d); backward, with `backward`, the two pre-activations again if `recompute`, then ∂W3 = dyᵀ·p,
    dg = dy·W3, ∂W1, ∂W2 = dhᵀ·x and dx = dh1·W1 + dh2·W2."""
    d, a = config.head_dim, config.A_dff
    rows = batch * config.num_attention_heads * d
    glus = config.num_reslayerA * config.num_denseA
    shapes = []
    for _ in range(config.num_hidden_layers):
        for start in range(0, rows, block):
            n = min(block, rows - start)
            per_glu = [(n, d, a), (n, d, a), (n, a, d)]
            if backward:
                per_glu += [(n, d, a), (n, d, a)] if recompute else []
                per_glu += [(d, n, a), (n, d, a), (a, n, d), (a, n, d), (n, a, d), (n, a, d)]
            shapes += per_glu * glus
    return shapes
