"""Serving throughput of a collapsed PLDR-LLM against a Llama of equal size, in vLLM and in HF `generate()`.

Runs in the vLLM environment (`bash tools/make_vllm_env.sh`, then `.venv-vllm/bin/python -m benchmarks.vllm_serving`).

Contenders, all float32 on the CPU with random weights (speed does not depend on the values; seed 0):

- PLDR-LLM 110M (hidden 896, 5 layers, 14 heads × 64, GLU 2389, vocab 32000), collapsed with
  `collapse(force=True)`, served by vLLM through this package's plugin (`plldr_hf/serving/vllm_pldrllm.py`);
- the same PLDR-LLM in HF `generate()`: one left-padded batch of all requests, KV cache, greedy;
- `transformers.LlamaForCausalLM` of the same sizes (biases on, untied head), in vLLM (its own Llama) and in HF
  `generate()` the same way.

Requests: `--requests` prompts of random token ids with lengths drawn uniformly from [8, 96] (seed 1), each asking for
`--new-tokens` greedy tokens; the end token is ignored, so every request produces exactly that many. tok/s = generated
tokens / wall time of one whole batch (vLLM: `LLM.generate` over all requests, its scheduler batching them
continuously; HF: one `generate()` call, prefill included). Each round runs the four contenders in turn, and the
order rotates from round to round; the report gives the median over `--rounds` rounds after one warm-up round.

Tokens: each engine's greedy tokens for every request are compared with HF `generate()` on that prompt alone.

FLOP bound of PLDR-LLM / Llama: the collapsed PLGA adds one (d × d) product per head to each query (2·H·d² FLOPs per
token and layer) and LayerNorm instead of RMSNorm; per token that is ≈ 0.6 % more multiply-adds than Llama, so
equal kernels would give a ratio of ≈ 0.99.

    .venv-vllm/bin/python -m benchmarks.vllm_serving            # 32 and 64 requests × 32 tokens
    .venv-vllm/bin/python -m benchmarks.vllm_serving --quick    # tiny models, a smoke run (≈ 2 min)

Writes `benchmarks/results/vllm_serving.md`, `.json` and `.png` (`--report-dir`).
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

from benchmarks.generate_speed import full_sizes, llama_config


# the 110M size of the released PLDR-LLM, as in the decode-speed benchmark
SHARED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "intermediate_size")
PLDR_ONLY = ("A_dff", "num_reslayerA", "num_denseA")
QUICK_SIZES = dict(
    vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, head_dim=32, intermediate_size=96
)
QUICK_PLDR_EXTRA = dict(A_dff=16, num_reslayerA=2, num_denseA=2)
CONTENDERS = ("vLLM PLDR-LLM (collapsed)", "vLLM Llama", "HF generate PLDR-LLM (collapsed)", "HF generate Llama")
MAX_MODEL_LEN = 256


def move_off_init(*models) -> None:
    """Biases and LayerNorms off their zero / one init, as after training, so the token checks see them too."""
    import torch

    with torch.no_grad():
        for model in models:
            for name, param in model.named_parameters():
                if name.endswith("bias") or "norm" in name:
                    param.add_(torch.randn_like(param) * 0.1)


def collapse_on_random_ids(model, vocab_size: int) -> None:
    """`collapse(force=True)` calibrated on 4 × 64 random ids (seed 2): random weights are not input-invariant."""
    import torch

    calibration = torch.randint(4, vocab_size, (4, 64), generator=torch.Generator().manual_seed(2))
    model.collapse(calibration, force=True)


def build_models(folder: Path, sizes: dict, pldr_extra: dict) -> dict:
    """Saves the collapsed PLDR-LLM and the Llama under `folder`; returns {name: (path, HF model)}."""
    import torch
    from transformers import LlamaForCausalLM

    from plldr_hf import PldrllmConfig, PldrllmForCausalLM

    torch.manual_seed(0)
    # no end token: every request generates exactly the asked number of tokens in both engines
    pldr = PldrllmForCausalLM(
        PldrllmConfig(**sizes, **pldr_extra, max_position_embeddings=MAX_MODEL_LEN, eos_token_id=None)
    ).eval()
    collapse_on_random_ids(pldr, sizes["vocab_size"])
    llama = LlamaForCausalLM(
        llama_config(sizes, MAX_MODEL_LEN, eos_token_id=None, bos_token_id=None, pad_token_id=0)
    ).eval()
    move_off_init(pldr, llama)
    models = {}
    for name, model in (("pldr", pldr), ("llama", llama)):
        path = folder / name
        model.save_pretrained(path)
        models[name] = (path, model)
    return models


def make_requests(count: int, vocab_size: int) -> list[list[int]]:
    import torch

    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(8, 97, (count,), generator=generator).tolist()
    return [torch.randint(4, vocab_size, (n,), generator=generator).tolist() for n in lengths]


def hf_batch(model, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """One left-padded `generate()` over all prompts; the generated ids per prompt."""
    import torch

    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    with torch.no_grad():
        out = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0
        )
    return out[:, width:].tolist()


def hf_alone(model, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    import torch

    with torch.no_grad():
        return [
            model.generate(torch.tensor([p]), max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)[
                0, len(p) :
            ].tolist()
            for p in prompts
        ]


def vllm_engine(path: Path, max_seqs: int, max_model_len: int = MAX_MODEL_LEN, **settings):
    from vllm import LLM

    return LLM(
        model=str(path),
        dtype="float32",
        skip_tokenizer_init=True,
        max_model_len=max_model_len,
        max_num_seqs=max_seqs,
        # the KV cache of this engine, in bytes: a fraction of the machine's memory (`gpu_memory_utilization` on the
        # CPU backend) is counted against what the process already holds, which a second engine in it exceeds
        kv_cache_memory_bytes=2 * 1024**3,
        seed=0,
        **settings,
    )


def vllm_batch(llm, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    outputs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


class Timed(NamedTuple):
    """What a contender that times itself returns (one run in a process of its own, its start-up not counted)."""

    outputs: list
    seconds: float


def rotated_rounds(runs: dict, rounds: int) -> tuple[dict, dict]:
    """Runs each of `runs` (name → call) once per round, the order rotated from round to round; the first round is a
    warm-up. Returns the measured seconds per name and each call's last output; a call returning `Timed` gives its
    own seconds."""
    names = list(runs)
    times, outputs = {name: [] for name in names}, {}
    for round_index in range(rounds + 1):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            start = time.perf_counter()
            result = runs[name]()
            seconds = time.perf_counter() - start
            outputs[name], seconds = result if isinstance(result, Timed) else (result, seconds)
            if round_index > 0:
                times[name].append(seconds)
        print(f"  round {round_index}{' (warm-up)' if round_index == 0 else ''} done", file=sys.stderr, flush=True)
    return times, outputs


def throughput(times: dict, generated: int) -> dict:
    """tok/s per contender: the median over the rounds, and each round's."""
    return {
        "tok_s": {name: generated / statistics.median(seconds) for name, seconds in times.items()},
        "tok_s_rounds": {name: [generated / t for t in seconds] for name, seconds in times.items()},
    }


def measure(engines: dict, models: dict, prompts, new_tokens: int, rounds: int) -> dict:
    """tok/s per contender: median over `rounds` (after one warm-up round), contenders rotated per round."""
    runs = {
        CONTENDERS[0]: lambda: vllm_batch(engines["pldr"], prompts, new_tokens),
        CONTENDERS[1]: lambda: vllm_batch(engines["llama"], prompts, new_tokens),
        CONTENDERS[2]: lambda: hf_batch(models["pldr"][1], prompts, new_tokens),
        CONTENDERS[3]: lambda: hf_batch(models["llama"][1], prompts, new_tokens),
    }
    times, outputs = rotated_rounds(runs, rounds)
    return {**throughput(times, len(prompts) * new_tokens), "outputs": outputs}


def plot(
    results: list[dict],
    path: Path,
    contenders=CONTENDERS,
    title: str = "110M-size models, float32 CPU: vLLM vs HF generate",
) -> None:
    """Median tok/s of each contender, grouped by batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(contenders)
    colors = ("tab:orange", "tab:blue", "navajowhite", "lightsteelblue")
    for i, (name, color) in enumerate(zip(contenders, colors)):
        xs = [j + (i - (len(contenders) - 1) / 2) * width for j in range(len(results))]
        ax.bar(xs, [r["tok_s"][name] for r in results], width, label=name, color=color)
    labels = [r.get("label", f"{r['requests']} requests") + f" × {r['new_tokens']} tokens" for r in results]
    ax.set_xticks(range(len(results)), labels)
    ax.set_ylabel("generated tokens / s (median)")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(results: list[dict], meta: dict) -> str:
    p, ll, hp, hl = CONTENDERS
    lines = [
        "# Serving throughput: collapsed PLDR-LLM vs Llama of equal size, vLLM and HF generate",
        "",
        "| requests × new tokens | "
        + " | ".join(CONTENDERS)
        + " | PLDR vLLM / Llama vLLM (target ≥ 0.9; FLOP bound ≈ 0.99)"
        " | PLDR vLLM / PLDR HF (target ≥ 1.5) | Llama vLLM / Llama HF | tokens equal to `generate()`: vLLM PLDR, "
        "vLLM Llama, HF batch PLDR, HF batch Llama |",
        "|---|" + "---|" * (len(CONTENDERS) + 4),
    ]
    for r in results:
        t, eq = r["tok_s"], r["equal"]
        lines.append(
            f"| {r['requests']} × {r['new_tokens']} | "
            + " | ".join(f"{t[name]:.1f} tok/s" for name in CONTENDERS)
            + f" | {t[p] / t[ll]:.2f} | {t[p] / t[hp]:.2f} | {t[ll] / t[hl]:.2f} | "
            + ", ".join(f"{eq[name]}/{r['requests']}" for name in CONTENDERS)
            + " |"
        )
    lines += [
        "",
        f"Median of {meta['rounds']} rounds after a warm-up round, contenders rotated per round; prompts of 8–96 random "
        f"token ids; greedy, end token ignored. Parameters: PLDR-LLM {meta['parameters']['pldr'] / 1e6:.1f}M "
        f"(collapsed: the metric learner is not run), Llama {meta['parameters']['llama'] / 1e6:.1f}M. "
        f"{meta['machine']}, torch {meta['torch']}, transformers {meta['transformers']}, vLLM {meta['vllm']} "
        f"(default engine settings: chunked prefill, prefix caching, float32; engines in the benchmark's process, 2 GiB "
        "KV cache each). Token check: each engine's tokens "
        "per request against HF `generate()` on that prompt alone.",
        "",
        "Per-round tok/s: `vllm_serving.json`. Plot: `vllm_serving.png`.",
    ]
    return "\n".join(lines) + "\n"


def parse_arguments(argv, description: str, name: str, extra_flags=()) -> argparse.Namespace:
    """The options the vLLM benchmarks take, and a benchmark's own (`extra_flags`: (flag, add_argument keywords));
    `--quick` shrinks the run to a smoke test."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--requests", type=int, nargs="+", default=[32, 64], help="batch sizes [32 64]")
    parser.add_argument("--new-tokens", type=int, default=32, help="greedy tokens per request [32]")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds [3]")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of HF generate [2]")
    parser.add_argument("--quick", action="store_true", help="tiny models, few requests: a smoke run")
    parser.add_argument("--work-dir", default=f"benchmarks/out/{name}", help="[%(default)s]")
    parser.add_argument("--report-dir", default="benchmarks/results", help="[%(default)s]")
    parser.add_argument("--stem", default=name, help="report file names STEM.md, .json, .png [%(default)s]")
    for flag, kwargs in extra_flags:
        parser.add_argument(flag, **kwargs)
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.new_tokens, args.rounds = [4], 6, 1
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    # each engine inside the process that drives it: with vLLM's separate engine-core process, an engine not being
    # timed still held a core of the 2-core machine, and each engine's tok/s halved (measured: learned G 147 vs 301
    # tok/s, collapsed 264 vs 523)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # vLLM drops a serving process's torch threads to 1 unless OMP_NUM_THREADS says otherwise, and HF `generate()`
    # runs in this process too
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    return args


def model_sizes(quick: bool) -> tuple[dict, dict]:
    """(the widths both families share, PLDR-LLM's metric-learner sizes): the released 110M, or tiny with `quick`."""
    if quick:
        return QUICK_SIZES, QUICK_PLDR_EXTRA
    full = full_sizes()
    return {k: full[k] for k in SHARED}, {k: full[k] for k in PLDR_ONLY}


def machine_and_versions() -> dict:
    import torch
    import transformers
    import vllm

    return {
        "machine": f"{platform.machine()} CPU ({os.cpu_count()} cores)",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "vllm": vllm.__version__,
    }


def write_report(report: Path, stem: str, text: str, meta: dict, results: list[dict], plot_to) -> None:
    report.mkdir(parents=True, exist_ok=True)
    (report / f"{stem}.md").write_text(text, encoding="utf-8")
    (report / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    plot_to(results, report / f"{stem}.png")
    print(text)


def main(argv=None) -> int:
    args = parse_arguments(argv, __doc__.split("\n\n")[0], "vllm_serving")
    import torch

    torch.set_num_threads(args.threads)
    work = Path(args.work_dir)
    sizes, extra = model_sizes(args.quick)
    models = build_models(work, sizes, extra)
    engines = {name: vllm_engine(path, max(args.requests)) for name, (path, _) in models.items()}
    results = []
    for count in args.requests:
        prompts = make_requests(count, sizes["vocab_size"])
        print(f"{count} requests × {args.new_tokens} tokens", file=sys.stderr, flush=True)
        measured = measure(engines, models, prompts, args.new_tokens, args.rounds)
        alone = {name: hf_alone(models[name][1], prompts, args.new_tokens) for name in ("pldr", "llama")}
        reference = dict(zip(CONTENDERS, (alone["pldr"], alone["llama"], alone["pldr"], alone["llama"])))
        equal = {name: sum(a == b for a, b in zip(measured["outputs"][name], reference[name])) for name in CONTENDERS}
        results.append(
            {
                "requests": count,
                "new_tokens": args.new_tokens,
                "tok_s": measured["tok_s"],
                "tok_s_rounds": measured["tok_s_rounds"],
                "equal": equal,
            }
        )
        print(json.dumps(results[-1]["tok_s"]), json.dumps(equal), file=sys.stderr, flush=True)
    meta = {
        "rounds": args.rounds,
        "parameters": {name: sum(p.numel() for p in m.parameters()) for name, (_, m) in models.items()},
        **machine_and_versions(),
        "quick": args.quick,
    }
    stem = f"{args.stem}_quick" if args.quick else args.stem
    write_report(Path(args.report_dir), stem, markdown(results, meta), meta, results, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
