"""Serving a learned-G PLDR-LLM in vLLM (G kept per request) against the same model collapsed in vLLM and the
learned-G model in HF `generate()` (its G-cache).

Runs in the vLLM environment (`bash tools/make_vllm_env.sh`, then `.venv-vllm/bin/python -m benchmarks.vllm_learned_g`).

Contenders, float32 on the CPU, random weights at the released 110M size (seed 0, as `benchmarks/vllm_serving.py`):

- **vLLM PLDR-LLM (learned G)**: the plugin's per-request G state (`plldr_hf/serving/vllm_g_state.py`): the metric
  learner runs once per request at prefill, over its whole prompt;
- **vLLM PLDR-LLM (collapsed)**: the same weights after `collapse(force=True)`, G a fixed parameter. It runs with the
  settings a learned G needs (no chunked prefill, no prefix caching), so the ratio measures the G state alone; the
  rounds repeat the same prompts, which prefix caching would otherwise skip;
- **HF generate PLDR-LLM (learned G)**: one left-padded `generate()` over all requests, KV and G caches, greedy.

Requests as in `vllm_serving.py`: prompts of 8–96 random token ids, `--new-tokens` greedy tokens each, end token
ignored. tok/s = generated tokens / wall time of one whole batch; each round runs the contenders in turn with the
order rotated; the report gives medians over `--rounds` rounds after a warm-up round. Tokens: each contender's greedy
tokens per request against HF `generate()` on that prompt alone (the learned-G model, or the collapsed one).

Cost bound of learned / collapsed: the metric learner adds, per request and layer, the Gram matrix (2·T·H·d²) and
the residual units on H·d rows of d (≈ 2·3·d·A_dff·units·dense per row) at prefill only; `flop_ratio` in the report
is collapsed FLOPs / learned FLOPs over a batch, the best a learned G can reach.

    .venv-vllm/bin/python -m benchmarks.vllm_learned_g            # 32 and 64 requests × 32 tokens
    .venv-vllm/bin/python -m benchmarks.vllm_learned_g --quick    # tiny models, a smoke run

Writes `benchmarks/results/vllm_learned_g.md`, `.json` and `.png` (`--report-dir`).
"""

import copy
import json
import sys
from pathlib import Path

from benchmarks.vllm_serving import (
    MAX_MODEL_LEN,
    collapse_on_random_ids,
    hf_alone,
    hf_batch,
    machine_and_versions,
    make_requests,
    model_sizes,
    move_off_init,
    parse_arguments,
    rotated_rounds,
    throughput,
    vllm_batch,
    vllm_engine,
    write_report,
)
from benchmarks.vllm_serving import plot as serving_plot


CONTENDERS = ("vLLM PLDR-LLM (learned G)", "vLLM PLDR-LLM (collapsed)", "HF generate PLDR-LLM (learned G)")
LIKE_A_LEARNED_G = dict(enable_chunked_prefill=False, enable_prefix_caching=False, max_num_batched_tokens=8192)


def build_models(folder: Path, sizes: dict, pldr_extra: dict) -> dict:
    """Saves the learned-G PLDR-LLM and its collapsed copy under `folder`; returns {name: (path, HF model)}."""
    import torch

    from plldr_hf import PldrllmConfig, PldrllmForCausalLM

    torch.manual_seed(0)
    config = PldrllmConfig(**sizes, **pldr_extra, max_position_embeddings=MAX_MODEL_LEN, eos_token_id=None)
    learned = PldrllmForCausalLM(config).eval()
    move_off_init(learned)
    collapsed = copy.deepcopy(learned)
    collapse_on_random_ids(collapsed, sizes["vocab_size"])
    models = {}
    for name, model in (("learned", learned), ("collapsed", collapsed)):
        path = folder / name
        model.save_pretrained(path)
        models[name] = (path, model)
    return models


def flop_ratio(config, prompts: list[list[int]], new_tokens: int) -> float:
    """Collapsed / learned multiply-add count of a batch (the learned G's extra work: Gram matrix and metric learner
    once per request and layer)."""
    h, d, hidden, inner, vocab = (config.num_attention_heads, config.head_dim, config.hidden_size,
                                  config.intermediate_size, config.vocab_size)  # fmt: skip
    per_token = config.num_hidden_layers * (4 * hidden * hidden + 3 * hidden * inner + h * d * d) + hidden * vocab
    tokens = sum(len(p) + new_tokens for p in prompts)
    attention = sum(config.num_hidden_layers * h * d * (len(p) + new_tokens) ** 2 for p in prompts)  # q·k and p·v
    collapsed = tokens * per_token + attention
    units = config.num_reslayerA * config.num_denseA * 3 * d * config.A_dff  # per row of a d × d matrix
    per_request = config.num_hidden_layers * h * (d * units + 3 * d**3)  # residual units + W·A and a·A_P
    gram = sum(config.num_hidden_layers * h * d * d * len(p) for p in prompts)
    return collapsed / (collapsed + len(prompts) * per_request + gram)


def plot(results: list[dict], path: Path) -> None:
    serving_plot(results, path, CONTENDERS, "PLDR-LLM 110M, float32 CPU: learned G in vLLM")


def markdown(results: list[dict], meta: dict) -> str:
    learned, collapsed, hf = CONTENDERS
    lines = [
        "# Serving a learned G: vLLM's per-request G state vs the collapsed model in vLLM and HF generate",
        "",
        "| requests × new tokens | " + " | ".join(CONTENDERS) + " | learned vLLM / collapsed vLLM (target ≥ 0.9; "
        "FLOP bound) | learned vLLM / learned HF | tokens equal to `generate()` alone: "
        + ", ".join(CONTENDERS)
        + " |",
        "|---|" + "---|" * (len(CONTENDERS) + 3),
    ]
    for r in results:
        t, eq = r["tok_s"], r["equal"]
        lines.append(
            f"| {r['requests']} × {r['new_tokens']} | "
            + " | ".join(f"{t[name]:.1f} tok/s" for name in CONTENDERS)
            + f" | {t[learned] / t[collapsed]:.2f} ({r['flop_ratio']:.2f}) | {t[learned] / t[hf]:.2f} | "
            + ", ".join(f"{eq[name]}/{r['requests']}" for name in CONTENDERS)
            + " |"
        )
    lines += [
        "",
        f"Median of {meta['rounds']} rounds after a warm-up round, contenders rotated per round; prompts of 8–96 random "
        f"token ids; greedy, end token ignored. PLDR-LLM {meta['parameters'] / 1e6:.1f}M parameters. Both vLLM engines "
        "run without chunked prefill and prefix caching (what a learned G needs), in the benchmark's own process, each with "
        "a 2 GiB KV cache. "
        f"{meta['machine']}, torch {meta['torch']}, transformers {meta['transformers']}, vLLM {meta['vllm']}.",
        "",
        "Per-round tok/s: `vllm_learned_g.json`. Plot: `vllm_learned_g.png`.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_arguments(argv, __doc__.split("\n\n")[0], "vllm_learned_g")
    import torch

    torch.set_num_threads(args.threads)
    sizes, extra = model_sizes(args.quick)
    models = build_models(Path(args.work_dir), sizes, extra)
    seqs = max(args.requests)
    engines = {
        "learned": vllm_engine(models["learned"][0], seqs),
        "collapsed": vllm_engine(models["collapsed"][0], seqs, **LIKE_A_LEARNED_G),
    }
    results = []
    for count in args.requests:
        prompts = make_requests(count, sizes["vocab_size"])
        print(f"{count} requests × {args.new_tokens} tokens", file=sys.stderr, flush=True)
        runs = {
            CONTENDERS[0]: lambda p=prompts: vllm_batch(engines["learned"], p, args.new_tokens),
            CONTENDERS[1]: lambda p=prompts: vllm_batch(engines["collapsed"], p, args.new_tokens),
            CONTENDERS[2]: lambda p=prompts: hf_batch(models["learned"][1], p, args.new_tokens),
        }
        times, outputs = rotated_rounds(runs, args.rounds)
        alone = {name: hf_alone(models[name][1], prompts, args.new_tokens) for name in ("learned", "collapsed")}
        reference = dict(zip(CONTENDERS, (alone["learned"], alone["collapsed"], alone["learned"])))
        results.append(
            {
                "requests": count,
                "new_tokens": args.new_tokens,
                **throughput(times, count * args.new_tokens),
                "equal": {name: sum(a == b for a, b in zip(outputs[name], reference[name])) for name in CONTENDERS},
                "flop_ratio": flop_ratio(models["learned"][1].config, prompts, args.new_tokens),
            }
        )
        print(json.dumps(results[-1]["tok_s"]), json.dumps(results[-1]["equal"]), file=sys.stderr, flush=True)
    meta = {
        "rounds": args.rounds,
        "parameters": sum(p.numel() for p in models["learned"][1].parameters()),
        **machine_and_versions(),
        "quick": args.quick,
    }
    stem = "vllm_learned_g_quick" if args.quick else "vllm_learned_g"
    write_report(Path(args.report_dir), stem, markdown(results, meta), meta, results, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
