"""A collapsed PLDR-LLM in vLLM two ways: this package's vLLM model (the plugin) against vLLM's Transformers backend
(`model_impl="transformers"`, which runs the transformers model with vLLM's attention and fused projections).

Runs in the vLLM environment (`bash tools/make_vllm_env.sh`, then `.venv-vllm/bin/python -m benchmarks.vllm_backends`).

One folder serves both: the released 110M widths, random weights (seed 0, biases and LayerNorms moved off their
init), collapsed, and without an LM-head bias (`final_bias=False`), because the Transformers backend would drop that
bias and the plugin refuses it there. Requests, rounds and the token check as in `benchmarks/vllm_serving.py`; both
engines with vLLM's default scheduling (chunked prefill, prefix caching). tok/s are medians of rotated rounds.

    .venv-vllm/bin/python -m benchmarks.vllm_backends [--quick]

Writes `benchmarks/results/vllm_backends.md`, `.json` and `.png` (`--report-dir`).
"""

import json
import sys
from pathlib import Path

from benchmarks.vllm_serving import (
    MAX_MODEL_LEN,
    collapse_on_random_ids,
    hf_alone,
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


CONTENDERS = ("vLLM, this package's model (plugin)", "vLLM Transformers backend")


def build_model(folder: Path, sizes: dict, pldr_extra: dict):
    import torch

    from plldr_hf import PldrllmConfig, PldrllmForCausalLM

    torch.manual_seed(0)
    config = PldrllmConfig(
        **sizes, **pldr_extra, max_position_embeddings=MAX_MODEL_LEN, eos_token_id=None, final_bias=False
    )
    model = PldrllmForCausalLM(config).eval()
    move_off_init(model)
    collapse_on_random_ids(model, sizes["vocab_size"])
    model.save_pretrained(folder)
    return model


def plot(results: list[dict], path: Path) -> None:
    serving_plot(results, path, CONTENDERS, "collapsed PLDR-LLM 110M, float32 CPU: two routes into vLLM")


def markdown(results: list[dict], meta: dict) -> str:
    plugin, backend = CONTENDERS
    lines = [
        "# A collapsed PLDR-LLM in vLLM: this package's model vs vLLM's Transformers backend",
        "",
        f"| requests × new tokens | {plugin} | {backend} | backend / plugin | tokens equal to `generate()` alone |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        t, eq = r["tok_s"], r["equal"]
        lines.append(
            f"| {r['requests']} × {r['new_tokens']} | {t[plugin]:.1f} tok/s | {t[backend]:.1f} tok/s | "
            f"{t[backend] / t[plugin]:.2f} | {eq[plugin]}/{r['requests']}, {eq[backend]}/{r['requests']} |"
        )
    lines += [
        "",
        f"Median of {meta['rounds']} rounds after a warm-up round, contenders rotated per round; prompts of 8–96 random "
        f"token ids; greedy, end token ignored. PLDR-LLM {meta['parameters'] / 1e6:.1f}M parameters, collapsed, no "
        "LM-head bias; both engines in the benchmark's process with vLLM's default scheduling and a 2 GiB KV cache. "
        f"{meta['machine']}, torch {meta['torch']}, transformers {meta['transformers']}, vLLM {meta['vllm']}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_arguments(argv, __doc__.split("\n\n")[0], "vllm_backends")
    import torch

    torch.set_num_threads(args.threads)
    sizes, extra = model_sizes(args.quick)
    folder = Path(args.work_dir) / "pldr-collapsed-no-head-bias"
    model = build_model(folder, sizes, extra)
    seqs = max(args.requests)
    # the reference tokens first: the Transformers backend compiles the transformers classes of this process
    prompt_sets = {count: make_requests(count, sizes["vocab_size"]) for count in args.requests}
    alone = {count: hf_alone(model, prompts, args.new_tokens) for count, prompts in prompt_sets.items()}
    engines = {
        CONTENDERS[0]: vllm_engine(folder, seqs),
        CONTENDERS[1]: vllm_engine(folder, seqs, model_impl="transformers"),
    }
    results = []
    for count, prompts in prompt_sets.items():
        print(f"{count} requests × {args.new_tokens} tokens", file=sys.stderr, flush=True)
        runs = {
            name: (lambda e=engine, p=prompts: vllm_batch(e, p, args.new_tokens)) for name, engine in engines.items()
        }
        times, outputs = rotated_rounds(runs, args.rounds)
        results.append(
            {
                "requests": count,
                "new_tokens": args.new_tokens,
                **throughput(times, count * args.new_tokens),
                "equal": {name: sum(a == b for a, b in zip(outputs[name], alone[count])) for name in CONTENDERS},
            }
        )
        print(json.dumps(results[-1]["tok_s"]), json.dumps(results[-1]["equal"]), file=sys.stderr, flush=True)
    meta = {
        "rounds": args.rounds,
        "parameters": sum(p.numel() for p in model.parameters()),
        **machine_and_versions(),
        "quick": args.quick,
    }
    stem = f"{args.stem}_quick" if args.quick else args.stem
    write_report(Path(args.report_dir), stem, markdown(results, meta), meta, results, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
