"""The metric learner alone, fused units against calling the modules: one layer's residual units at the
110M shape (14 heads × 64, 8 units of 64→170→64 GLUs) on the Gram matrices of a training batch (4 sequences) and of
a scoring batch (16 sequences), forward + backward and forward without gradients, one torch thread.

    python -m benchmarks.metric_learner [--rounds 15] [--output benchmarks/results/metric_learner]

Contenders alternate within each round, in serpentine order (`plldr_hf.timing.interleaved`); the table gives the minimum, the
25th percentile and the median per contender (a shared machine's load shows in the upper percentiles) and the paired
ratio of each fused contender to its module-path counterpart (median over rounds of the within-round ratio). Writes
`.md` and `.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from plldr_hf.timing import interleaved


DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "metric_learner"


def contenders(batch_train: int, batch_score: int):
    """(key, label, baseline key, step) per contender; the step runs one metric learner call."""
    import torch

    from plldr_hf import PldrllmConfig
    from plldr_hf.models.pldrllm.modeling_pldrllm import PldrllmAttention, metric_learner
    from plldr_hf.training.recipes import model_fields

    config = PldrllmConfig(vocab_size=32000, **model_fields("pldrllm", "110m"))
    attention = PldrllmAttention(config, 0)
    heads, d = config.num_attention_heads, config.head_dim
    generator = torch.Generator().manual_seed(0)

    def gram(batch, grad):
        q = torch.randn(batch, heads, 256, d, generator=generator) / 16
        return (q.transpose(-1, -2) @ q).requires_grad_(grad)

    a_train, a_score = gram(batch_train, True), gram(batch_score, False)
    grad_out = torch.randn(a_train.shape, generator=generator)

    def train(**kwargs):
        def step():
            metric_learner(a_train, attention.layernorm1, attention.reslayerAs, **kwargs).backward(grad_out)
            attention.zero_grad(set_to_none=True)
            a_train.grad = None

        return step

    def score(**kwargs):
        def step():
            with torch.no_grad():
                metric_learner(a_score, attention.layernorm1, attention.reslayerAs, **kwargs)

        return step

    return [
        ("modules_recompute", f"modules, blocks recomputed (train, {batch_train} seq)", None,
         train(fused=False, recompute=True)),
        ("fused_recompute", f"fused, pre-activations recomputed (train, {batch_train} seq)", "modules_recompute",
         train(recompute=True)),
        ("modules_stored", f"modules, activations stored (train, {batch_train} seq)", None, train(fused=False)),
        ("fused_stored", f"fused, activations stored (train, {batch_train} seq)", "modules_stored", train()),
        ("modules_forward", f"modules, no grad (scoring, {batch_score} seq)", None, score(fused=False)),
        ("fused_forward", f"fused, no grad (scoring, {batch_score} seq)", "modules_forward", score()),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.metric_learner", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (default 15)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="output path without suffix")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    entries = contenders(batch_train=4, batch_score=16)
    _, times = interleaved({key: step for key, _, _, step in entries}, args.rounds)
    rows = []
    for key, label, baseline, _ in entries:
        runs = sorted(times[key])
        paired = None
        if baseline is not None:
            paired = statistics.median(a / b for a, b in zip(times[key], times[baseline]))
        rows.append(dict(key=key, label=label, baseline=baseline, min_ms=runs[0] * 1e3,
                         p25_ms=runs[len(runs) // 4] * 1e3, median_ms=statistics.median(runs) * 1e3,
                         paired_ratio=paired))  # fmt: skip
    lines = [
        "# Metric learner alone: fused units / modules (one layer, 110M shape, 1 thread)",
        "",
        f"- command: `python -m benchmarks.metric_learner --rounds {args.rounds}`; torch {torch.__version__}",
        "- paired ratio: median over rounds of (fused / modules) within a round; < 1 is faster",
        "",
        "| contender | min ms | p25 ms | median ms | paired ratio to the modules |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "—" if r["paired_ratio"] is None else f"{r['paired_ratio']:.2f}×"
        lines.append(f"| {r['label']} | {r['min_ms']:.0f} | {r['p25_ms']:.0f} | {r['median_ms']:.0f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.with_suffix(".md").write_text(text)
    args.output.with_suffix(".json").write_text(json.dumps({"rounds": args.rounds, "rows": rows}, indent=2) + "\n")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
