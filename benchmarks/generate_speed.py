"""Greedy-decoding speed of PLDR-LLM: collapsed vs G-cached vs uncached, against a Llama of equal size.

Variants, all float32 on the CPU with random weights (speed does not depend on the values):

- `collapsed`: PLDR-LLM collapsed (`collapse(force=True)`): stock SDPA fed q' = q_rot·G, plain `DynamicCache`;
- `uncollapsed`: PLDR-LLM with KV + G cache (the reference semantics: G computed once from the prompt);
- `no_cache`: PLDR-LLM uncollapsed without any cache (`use_cache=False`: the whole sequence, metric learner
  included, is recomputed at every step);
- `llama`: `transformers.LlamaForCausalLM` with the same sizes (the 110m preset of `plldr_hf.training.options`:
  hidden 896, 5 layers, 14 heads × 64, intermediate 2389, vocab 32000; biases on, untied head), SDPA and
  `DynamicCache`.

tokens/s = batch × new tokens / wall time of one `generate()` call (prefill included); the median over `--repeats`
runs, after one warm-up run per variant. The variants run round-robin inside each repeat, so load from other
processes affects them alike. Peak memory is the weights plus the largest extra heap in use during `generate()`
(glibc `mallinfo2`, sampled every millisecond; resident-set size where that is unavailable).

    python benchmarks/generate_speed.py                 # full protocol, writes benchmarks/results/generate_speed.md
    python benchmarks/generate_speed.py --quick         # tiny sizes, < 1 min: a smoke run of the script
    python benchmarks/generate_speed.py --profile       # also profile one decode step of collapsed and llama

Targets: collapsed ≥ 0.95 × llama (a decode step adds one d×d product per head to SDPA) and collapsed ≥ 3 × no_cache.
"""

import argparse
import ctypes
import ctypes.util
import datetime
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path


def full_sizes() -> dict:
    """The released 110M size: the `110m` preset of `plldr_hf.training.options.PRESETS` (model and vocabulary), with
    this benchmark's protocol. Read when needed, so importing the benchmark imports no torch."""
    from plldr_hf.training.options import PRESETS
    from plldr_hf.training.recipes import model_fields

    return dict(
        model_fields("pldrllm", "110m"),
        vocab_size=PRESETS["pldrllm"]["110m"]["run"]["vocab_size"],
        batch_sizes=(1, 8),
        prompt_len=128,
        new_tokens=128,
        repeats=5,
    )


QUICK = dict(
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    head_dim=16,
    intermediate_size=170,
    A_dff=24,
    num_reslayerA=2,
    num_denseA=2,
    batch_sizes=(1, 2),
    prompt_len=16,
    new_tokens=16,
    repeats=3,
)
VARIANTS = {
    "collapsed": "PLDR collapsed: SDPA on q_rot·G, DynamicCache",
    "uncollapsed": "PLDR uncollapsed, KV + G cache",
    "no_cache": "PLDR uncollapsed, no cache",
    "llama": "Llama, SDPA, DynamicCache",
}
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "generate_speed.md"


class HeapPeak:
    """Largest extra heap in use while the context is open, sampled by a background thread (bytes)."""

    def __init__(self, interval: float = 1e-3):
        self.interval = interval
        self.peak = 0
        self._read = self._mallinfo_reader() or self._rss_reader()

    @staticmethod
    def _mallinfo_reader():
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallinfo2 = libc.mallinfo2
        except (OSError, AttributeError):
            return None

        class MallInfo2(ctypes.Structure):
            _fields_ = [
                (name, ctypes.c_size_t)
                for name in (
                    "arena",
                    "ordblks",
                    "smblks",
                    "hblks",
                    "hblkhd",
                    "usmblks",
                    "fsmblks",
                    "uordblks",
                    "fordblks",
                    "keepcost",
                )
            ]

        mallinfo2.restype = MallInfo2
        # bytes in use: small/medium chunks in the arenas plus mmapped large blocks (most tensors)
        return lambda: (lambda info: info.uordblks + info.hblkhd)(mallinfo2())

    @staticmethod
    def _rss_reader():
        import psutil

        process = psutil.Process()
        return lambda: process.memory_info().rss

    def __enter__(self):
        self._stop = threading.Event()
        self._baseline = self._read()
        self._max = self._baseline
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self._max = max(self._max, self._read())
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._max = max(self._max, self._read())
        self.peak = self._max - self._baseline
        return False


def build_models(sizes: dict, variants: list[str], prompt_len: int):
    """The PLDR-LLM variants share one set of random weights; Llama gets its own of the same sizes."""
    import copy

    import torch
    from transformers import LlamaForCausalLM

    from plldr_hf import PldrllmConfig, PldrllmForCausalLM

    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "intermediate_size")
    common = {k: sizes[k] for k in keys}
    max_positions = max(1024, prompt_len + sizes["new_tokens"])
    models = {}
    torch.manual_seed(0)
    if set(variants) & {"collapsed", "uncollapsed", "no_cache"}:
        config = PldrllmConfig(
            **common,
            A_dff=sizes["A_dff"],
            num_reslayerA=sizes["num_reslayerA"],
            num_denseA=sizes["num_denseA"],
            max_position_embeddings=max_positions,
        )
        config._attn_implementation = "sdpa"
        pldr = PldrllmForCausalLM(config).eval()
        if "collapsed" in variants:
            collapsed = copy.deepcopy(pldr)
            # random weights are not input-invariant: force, with two short calibration inputs (speed only)
            collapsed.collapse([[config.eos_token_id], [5, 6, 7, 8]], force=True)
            models["collapsed"] = collapsed
        for key in ("uncollapsed", "no_cache"):
            if key in variants:
                models[key] = pldr
    if "llama" in variants:
        config = llama_config(common, max_positions, pad_token_id=0, bos_token_id=2, eos_token_id=3)
        config._attn_implementation = "sdpa"
        models["llama"] = LlamaForCausalLM(config).eval()
    return models


def llama_config(sizes: dict, max_positions: int, **special_ids):
    """The Llama of equal size to PLDR-LLM: the same widths, biases on every projection, an untied head."""
    from transformers import LlamaConfig

    return LlamaConfig(
        **sizes,
        num_key_value_heads=sizes["num_attention_heads"],
        max_position_embeddings=max_positions,
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=False,
        rope_theta=10000.0,
        **special_ids,
    )


def weight_bytes(model) -> int:
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


def generate_once(model, ids, new_tokens: int, use_cache: bool) -> tuple[float, int]:
    import torch

    with torch.no_grad(), HeapPeak() as heap:
        start = time.perf_counter()
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            use_cache=use_cache,
            pad_token_id=0,
        )
        elapsed = time.perf_counter() - start
    assert out.shape[1] == ids.shape[1] + new_tokens
    return elapsed, heap.peak


def _prefill(model, ids) -> tuple[dict, object]:
    """Run the prompt with a fresh `DynamicCache`; returns the cache keyword dict and the greedy next token."""
    import inspect

    import torch
    from transformers import DynamicCache

    # transformers 5.24 renamed the cache keyword `past_key_values` -> `cache`
    kwarg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    cache = {kwarg: DynamicCache(config=model.config)}
    with torch.no_grad():
        logits = model(ids, use_cache=True, logits_to_keep=1, **cache).logits
    return cache, logits[:, -1:].argmax(-1)


def _decode_step(model, next_ids, cache: dict) -> float:
    import torch

    with torch.no_grad():
        start = time.perf_counter()
        model(next_ids, use_cache=True, **cache)
        elapsed = time.perf_counter() - start
    # drop the token again, so every step sees the same cache length
    next(iter(cache.values())).crop(-1)
    return elapsed


def profile_decode_step(models: dict, ids, steps: int = 5, rows: int = 15) -> str:
    """torch.profiler table of `steps` single-token decode steps of the collapsed PLDR-LLM and Llama after a prefill of `ids`."""
    from torch.profiler import ProfilerActivity, profile

    report = []
    for key in ("collapsed", "llama"):
        if key not in models:
            continue
        model = models[key]
        cache, next_ids = _prefill(model, ids)
        for _ in range(2):
            _decode_step(model, next_ids, cache)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            elapsed = sum(_decode_step(model, next_ids, cache) for _ in range(steps)) / steps
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)
        report.append(f"### {VARIANTS[key]}: {1e3 * elapsed:.1f} ms per decode step (under the profiler)\n\n{table}")
    return "\n\n".join(report)


def step_timing(models: dict, batch_sizes, prompt_len: int, vocab_size: int, steps: int) -> str:
    """Median time of one single-token decode step after a `prompt_len` prefill, variants interleaved step by step.

    Isolates the per-token cost that the collapsed ≥ 0.95 × Llama target is about, from prefill and `generate()`
    overhead.
    """
    import torch

    keys = [key for key in ("collapsed", "uncollapsed", "llama") if key in models]
    generator = torch.Generator().manual_seed(2)
    lines = [
        "| batch | "
        + " | ".join(f"{key}: ms per step (median)" for key in keys)
        + " | llama/collapsed (per-step speed collapsed/llama) |",
        "|---|" + "---|" * (len(keys) + 1),
    ]
    for batch in batch_sizes:
        ids = torch.randint(4, vocab_size, (batch, prompt_len), generator=generator)
        state = {key: _prefill(models[key], ids) for key in keys}
        for key in keys:
            _decode_step(models[key], state[key][1], state[key][0])
        times = {key: [] for key in keys}
        for _ in range(steps):
            for key in keys:
                times[key].append(_decode_step(models[key], state[key][1], state[key][0]))
        median = {key: statistics.median(times[key]) for key in keys}
        ratio = f"{median['llama'] / median['collapsed']:.3f}" if {"collapsed", "llama"} <= set(keys) else "n/a"
        lines.append(f"| {batch} | " + " | ".join(f"{1e3 * median[key]:.1f}" for key in keys) + f" | {ratio} |")
    return "\n".join(lines)


def measure_generate(models: dict, variants: list, sizes: dict, batch_sizes, new_tokens: dict, verbose: bool) -> dict:
    """{(batch, variant): numbers} from `repeats` interleaved `generate()` runs per batch size, after a warm-up."""
    import torch

    generator = torch.Generator().manual_seed(1)
    results = {}
    for batch in batch_sizes:
        ids = torch.randint(4, sizes["vocab_size"], (batch, sizes["prompt_len"]), generator=generator)
        for key in variants:
            # warm-up: lazy initialisation, allocator and thread pools; a few tokens are enough
            generate_once(models[key], ids, min(new_tokens[key], 4), use_cache=key != "no_cache")
        times = {key: [] for key in variants}
        peaks = {key: 0 for key in variants}
        for repeat in range(sizes["repeats"]):
            for key in variants:
                elapsed, peak = generate_once(models[key], ids, new_tokens[key], use_cache=key != "no_cache")
                times[key].append(elapsed)
                peaks[key] = max(peaks[key], peak)
                if verbose:
                    print(f"batch {batch} repeat {repeat} {key}: {elapsed:.2f} s", file=sys.stderr, flush=True)
        for key in variants:
            tokens = batch * new_tokens[key]
            results[batch, key] = dict(
                tokens_per_s=tokens / statistics.median(times[key]),
                slowest=tokens / max(times[key]),
                fastest=tokens / min(times[key]),
                seconds=statistics.median(times[key]),
                weights=weight_bytes(models[key]),
                peak_extra=peaks[key],
            )
    return results


def generate_tables(results: dict, variants: list, batch_sizes) -> list[str]:
    mib = 2**20
    lines = [
        "| batch | variant | tokens/s (median) | range (min–max) | s per run | weights (MiB) | peak extra (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for batch in batch_sizes:
        for key in variants:
            r = results[batch, key]
            lines.append(
                f"| {batch} | {VARIANTS[key]} | {r['tokens_per_s']:.1f} | {r['slowest']:.1f}–{r['fastest']:.1f} "
                f"| {r['seconds']:.2f} | {r['weights'] / mib:.0f} | {r['peak_extra'] / mib:.1f} |"
            )
    ratios = [("collapsed", "llama", 0.95), ("collapsed", "uncollapsed", None), ("collapsed", "no_cache", 3.0)]
    shown = [(x, y, t) for x, y, t in ratios if x in variants and y in variants]
    if shown:
        lines += [
            "",
            "| batch | " + " | ".join(f"{x}/{y}" + (f" (target ≥ {t:g})" if t else "") for x, y, t in shown) + " |",
            "|---|" + "---|" * len(shown),
        ]
        for batch in batch_sizes:
            cells = []
            for x, y, target in shown:
                ratio = results[batch, x]["tokens_per_s"] / results[batch, y]["tokens_per_s"]
                verdict = "" if target is None else (" ✓" if ratio >= target else " ✗")
                cells.append(f"{ratio:.2f}{verdict}")
            lines.append(f"| {batch} | " + " | ".join(cells) + " |")
    return lines


def run(args) -> str:
    import torch
    import transformers

    sizes = dict(QUICK if args.quick else full_sizes())
    for key in ("prompt_len", "new_tokens", "repeats"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    batch_sizes = tuple(args.batch_sizes) if args.batch_sizes else sizes["batch_sizes"]
    if args.threads:
        torch.set_num_threads(args.threads)
    variants = list(args.variants)
    new_tokens = {key: sizes["new_tokens"] for key in variants}
    if args.no_cache_new_tokens and "no_cache" in variants:
        new_tokens["no_cache"] = args.no_cache_new_tokens
    models = build_models(sizes, variants, sizes["prompt_len"])

    count = {key: sum(p.numel() for p in model.parameters()) for key, model in models.items()}
    command = ("python benchmarks/generate_speed.py " + " ".join(args.argv)).strip()
    lines = [
        "# Greedy decoding speed: PLDR-LLM collapsed / G-cached / uncached vs Llama",
        "",
        f"- command: `{command}`",
        f"- date: {datetime.date.today().isoformat()}; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs visible, torch threads {torch.get_num_threads()}; torch {torch.__version__}, "
        f"transformers {transformers.__version__}; float32, random weights",
        f"- sizes: hidden {sizes['hidden_size']}, {sizes['num_hidden_layers']} layers, "
        f"{sizes['num_attention_heads']} heads × {sizes['head_dim']}, intermediate {sizes['intermediate_size']}, "
        f"vocab {sizes['vocab_size']}; PLDR metric learner {sizes['num_reslayerA']} units × {sizes['num_denseA']} "
        f"GLUs of width {sizes['A_dff']}; parameters: "
        + ", ".join(f"{key} {count[key] / 1e6:.1f}M" for key in sorted(count)),
    ]
    if sizes["repeats"] > 0:
        lines += [
            f"- prompt {sizes['prompt_len']} tokens, {sizes['new_tokens']} new tokens (greedy, EOS suppressed); "
            f"tokens/s = batch × new tokens / wall time of `generate()` (prefill included), median of "
            f"{sizes['repeats']} runs after a warm-up, variants interleaved",
            "- peak memory = weights + largest extra heap in use during `generate()` (KV cache, activations)",
        ]
        if new_tokens.get("no_cache", sizes["new_tokens"]) != sizes["new_tokens"]:
            lines.append(
                f"- **(c) generates only {new_tokens['c']} new tokens** (time budget): its cost per token grows with "
                f"the sequence length, so this overstates its tokens/s and understates a/c"
            )
        results = measure_generate(models, variants, sizes, batch_sizes, new_tokens, args.verbose)
        lines += [""] + generate_tables(results, variants, batch_sizes)
    text = "\n".join(lines) + "\n"
    if args.step_timing:
        text += (
            f"\n## One decode step after a {sizes['prompt_len']}-token prompt ({args.step_timing} steps per variant, "
            f"interleaved)\n\n"
        )
        text += step_timing(models, batch_sizes, sizes["prompt_len"], sizes["vocab_size"], args.step_timing) + "\n"
    if args.profile:
        ids = torch.randint(
            4, sizes["vocab_size"], (1, sizes["prompt_len"]), generator=torch.Generator().manual_seed(3)
        )
        text += "\n## One decode step, batch 1 (torch.profiler, self CPU time)\n\n```\n"
        text += profile_decode_step(models, ids) + "\n```\n"
    return text


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run in well under a minute)")
    parser.add_argument(
        "--output", help="Markdown file for the tables (default: benchmarks/results/generate_speed.md; --quick: none)"
    )
    parser.add_argument(
        "--repeats", type=int, help="timed generate() runs per variant (default: 5; --quick: 3; 0: skip them)"
    )
    parser.add_argument("--prompt-len", type=int, help="prompt tokens (default: 128; --quick: 16)")
    parser.add_argument("--new-tokens", type=int, help="generated tokens (default: 128; --quick: 16)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help="batch sizes (default: 1 8; --quick: 1 2)")
    parser.add_argument(
        "--variants", nargs="+", choices=sorted(VARIANTS), default=sorted(VARIANTS), help="variants to run"
    )
    parser.add_argument(
        "--no-cache-new-tokens",
        type=int,
        help="generate only this many tokens in variant (c) (its runs are long; gives a lower bound on a/c)",
    )
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument(
        "--step-timing",
        type=int,
        metavar="N",
        help="append the median time of N single-token decode steps per variant (a, b, d), interleaved",
    )
    parser.add_argument("--profile", action="store_true", help="append a torch.profiler table of one decode step")
    parser.add_argument("--verbose", action="store_true", help="print each run's time to stderr")
    args = parser.parse_args(argv)
    args.argv = list(argv)
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    text = run(args)
    print(text)
    if args.output or not args.quick:
        output = Path(args.output) if args.output else DEFAULT_OUTPUT
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
