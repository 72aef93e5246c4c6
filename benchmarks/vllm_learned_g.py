"""Serving a learned-G PLDR-LLM in vLLM (G kept per request) against the same model collapsed in vLLM and the
learned-G model in HF `generate()` (its G-cache), at short prompts and at the papers' context lengths.

Runs in the vLLM environment (`bash tools/make_vllm_env.sh`, then `.venv-vllm/bin/python -m benchmarks.vllm_learned_g`).

Contenders, float32 on the CPU, random weights at the released 110M size (seed 0, as `benchmarks/vllm_serving.py`),
or a trained model (`--model DIR`) and its copy collapsed on texts `collapse()` must accept (`--calibration FILE`):

- **vLLM PLDR-LLM (learned G)**: the plugin's per-request G state (`plldr_hf/serving/vllm_g_state.py`): the metric
  learner runs once per request at prefill, over its whole prompt, and decode reads G in place;
- **vLLM PLDR-LLM (collapsed)**: the same weights after `collapse(force=True)`, G a fixed parameter. Both engines run
  with the settings a learned G needs (no chunked prefill, no prefix caching, the same token budget per step), so the
  ratio measures the G state alone; the rounds repeat the same prompts, which prefix caching would otherwise skip;
- **HF generate PLDR-LLM (learned G)**: one left-padded `generate()` over all requests, KV and G caches, greedy.

Each contender runs in a process of its own that loads its model once and times each batch it is sent (`Worker`):
with both engines in one process, the engine built first ran slower than the one built second (16 × 512 tokens,
learned / collapsed 0.81 with the learned engine built first, 0.94 with it built second), and neither order is the
fair one.

Workloads: `--requests` batches of prompts of 8–96 random token ids (as `vllm_serving.py`), and `--long-requests`
prompts of each of `--long-prompts` tokens: consecutive windows of the embedded Shakespeare text
(`plldr_hf/data/en_shakespeare`, validation split) under the released SentencePiece tokenizer
(`tests/fixtures/pldrllm_released`). Each request asks for `--new-tokens` greedy tokens, end token ignored.
tok/s = generated tokens / wall time of one whole batch; each round runs the contenders in turn with the order
rotated; the report gives medians over `--rounds` rounds after a warm-up round, and the machine's load average
when the run started. Tokens: each contender's greedy tokens per request against HF `generate()` on that prompt alone.

FLOP bound of learned / collapsed (`benchmarks.flops.serving_bound`): the collapsed model's FLOPs of a batch as vLLM
runs it (the LM head only where it samples: each prompt's last position and every decode step; causal attention at
prefill) over the same plus what a learned G adds once per request and layer at prefill: the Gram matrix
(2·T·H·d²), the residual units on H·d rows of d (≈ 2·3·d·A_dff·units·dense per row) and the power law; the best a
learned G can reach.

Each change on its own (`changes` in the report, one layer of the 110M metric learner at the 64-request workload):
the prefill metric learner on torch's GEMMs (`fused_units.py`) against vLLM's CPU GEMM, and the decode product q·G
read by gathering each request's G against reading it in place.

    .venv-vllm/bin/python -m benchmarks.vllm_learned_g            # 32, 64 short; 16 × 512 and 16 × 1,024 tokens
    .venv-vllm/bin/python -m benchmarks.vllm_learned_g --quick    # tiny models, a smoke run
    .venv-vllm/bin/python -m benchmarks.vllm_learned_g --requests 64 --long-prompts 512 --profile --stem vllm_learned_g_profile

`--profile` adds, per workload, one batch of the learned engine under `torch.profiler`: its oneDNN GEMM time split
into the metric learner's residual units (products whose operands are d or A_dff wide) and the model's linear layers
and LM head, each with its FLOP rate (`benchmarks.flops.serving_flops`), both from the same batch. The profiler
slows the small operations, so this batch is not timed.

Writes `benchmarks/results/vllm_learned_g.md`, `.json` and `.png` (`--report-dir`, `--stem`).
"""

import copy
import functools
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.flops import serving_bound, serving_flops
from benchmarks.vllm_serving import (
    MAX_MODEL_LEN,
    Timed,
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
REPO = Path(__file__).resolve().parents[1]
TOKENIZER = REPO / "tests" / "fixtures" / "pldrllm_released"
FLAGS = (
    ("--long-prompts", dict(type=int, nargs="*", default=[512, 1024], help="prompt lengths of the long workloads")),
    ("--long-requests", dict(type=int, default=16, help="requests per long workload [16]")),
    ("--model", dict(help="a trained learned-G PLDR-LLM folder instead of random weights (with --calibration)")),
    ("--calibration", dict(help="texts, one per line, on which --model's collapse() must accept its G")),
    (
        "--profile",
        dict(
            action="store_true",
            help="after each workload's rounds, one batch per vLLM engine under "
            "torch.profiler: its oneDNN GEMM time, and the metric learner's GEMM rate from it",
        ),
    ),
)


def like_a_learned_g(max_model_len: int) -> dict:
    """The engine settings both vLLM contenders get: what a learned G needs (whole prompts, no prefix cache) and
    one token budget per step."""
    budget = max(8192, max_model_len)
    return dict(enable_chunked_prefill=False, enable_prefix_caching=False, max_num_batched_tokens=budget)


def build_models(folder: Path, sizes: dict, pldr_extra: dict, max_len: int) -> dict:
    """Saves the learned-G PLDR-LLM and its collapsed copy under `folder`; returns {name: (path, HF model)}."""
    import torch

    from plldr_hf import PldrllmConfig, PldrllmForCausalLM

    torch.manual_seed(0)
    config = PldrllmConfig(**sizes, **pldr_extra, max_position_embeddings=max_len, eos_token_id=None)
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


def trained_models(folder: Path, model_dir: str, calibration: str) -> dict:
    """A trained model and its collapsed copy, collapsed without `force`: `collapse()` must accept the G it measures
    on the calibration texts. Returns {name: (path, HF model)} as `build_models`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from plldr_hf.loading import read_texts

    learned = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    texts = read_texts(calibration)
    collapsed = copy.deepcopy(learned)
    collapsed.collapse(calibration=texts, tokenizer=AutoTokenizer.from_pretrained(model_dir))
    collapsed.save_pretrained(folder / "collapsed")
    return {"learned": (Path(model_dir), learned), "collapsed": (folder / "collapsed", collapsed)}


def text_prompts(count: int, length: int, vocab_size: int, tokenizer_dir: Path = TOKENIZER) -> list[list[int]]:
    """`count` consecutive windows of `length` tokens of the embedded Shakespeare validation text (ids folded into a
    smaller vocabulary, for the quick run's tiny model)."""
    from transformers import AutoTokenizer

    from plldr_hf.training.corpus import embedded_data_path

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    with gzip.open(embedded_data_path("en_shakespeare", "validation.txt.gz"), "rt", encoding="utf-8") as text:
        ids = tokenizer(text.read())["input_ids"]
    if len(ids) < count * length:
        raise ValueError(f"the validation text has {len(ids)} tokens, fewer than {count} × {length}")
    return [[i % vocab_size for i in ids[k * length : (k + 1) * length]] for k in range(count)]


class Worker:
    """One contender in a process of its own (this module with `--worker KIND FOLDER`), which loads its model once
    and then runs each batch it is sent, timing it itself. Between batches it waits on its input and uses no CPU, so
    no contender runs beside another's threads, memory or engine, whichever was started first."""

    def __init__(self, kind: str, folder: Path, max_len: int, max_seqs: int, threads: int):
        argv = [sys.executable, "-m", "benchmarks.vllm_learned_g", "--worker", kind, str(folder)]
        argv += [str(max_len), str(max_seqs), str(threads)]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
        self._answer()  # ready

    def _answer(self) -> dict:
        for line in self.process.stdout:  # vLLM and transformers may print lines of their own
            if line.startswith(ANSWER):
                return json.loads(line[len(ANSWER) :])
        raise RuntimeError(f"benchmark worker stopped (exit code {self.process.wait()})")

    def _send(self, prompts: list[list[int]], new_tokens: int, profile: bool = False) -> dict:
        self.process.stdin.write(json.dumps({"prompts": prompts, "new_tokens": new_tokens, "profile": profile}) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def __call__(self, prompts: list[list[int]], new_tokens: int) -> Timed:
        answer = self._send(prompts, new_tokens)
        return Timed(answer["outputs"], answer["seconds"])

    def gemm_seconds(self, prompts: list[list[int]], new_tokens: int) -> dict:
        """{"model": …, "units": …}: the oneDNN GEMM time (`_C::onednn_mm`) of one batch run under `torch.profiler`,
        split by the widths of the products: the metric learner's residual units (d and A_dff wide) and the rest
        (the model's linear layers and LM head)."""
        return self._send(prompts, new_tokens, profile=True)["gemm_seconds"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


ANSWER = "WORKER-ANSWER "


def worker(kind: str, folder: str, max_len: str, max_seqs: str, threads: str) -> int:
    """The loop of a `Worker` process: a vLLM engine ("vllm") or the transformers model ("hf") on one folder."""
    import torch

    torch.set_num_threads(int(threads))
    if kind == "vllm":
        engine = vllm_engine(Path(folder), int(max_seqs), int(max_len), **like_a_learned_g(int(max_len)))
        run = functools.partial(vllm_batch, engine)
    else:
        from plldr_hf import PldrllmForCausalLM

        model = PldrllmForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        run = functools.partial(hf_batch, model)
    print(ANSWER + "{}", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request["profile"]:
            print(ANSWER + json.dumps({"gemm_seconds": profiled_gemms(run, request, folder)}), flush=True)
            continue
        start = time.perf_counter()
        outputs = run(request["prompts"], request["new_tokens"])
        answer = {"outputs": outputs, "seconds": time.perf_counter() - start}
        print(ANSWER + json.dumps(answer), flush=True)
    return 0


def profiled_gemms(run, request: dict, folder: str) -> dict:
    """One batch under `torch.profiler`: the oneDNN GEMM seconds of the metric learner's units (every operand d or
    A_dff wide) and of the rest, from the same run (`Worker.gemm_seconds`)."""
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoConfig

    import plldr_hf  # noqa: F401  (registers the family for AutoConfig)

    config = AutoConfig.from_pretrained(folder)
    units = {config.head_dim, config.A_dff}
    model = {config.hidden_size, config.num_attention_heads * config.head_dim, config.intermediate_size}
    if units & model:
        raise SystemExit(f"error: --profile tells the units' GEMMs by their widths {units}, which the model's share")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        run(request["prompts"], request["new_tokens"])
    seconds = {"model": 0.0, "units": 0.0}
    for event in profiler.key_averages(group_by_input_shape=True):
        if event.key == "_C::onednn_mm":
            widths = {shape[-1] for shape in event.input_shapes if len(shape) == 2}
            seconds["units" if widths <= units else "model"] += event.self_cpu_time_total / 1e6
    return seconds


def change_timings(learned_model, prompts: list[list[int]]) -> dict:
    """Each change measured on its own, on layer 0 of the learned model with random queries of the prompts' lengths:
    the prefill G of all prompts (metric learner on torch's GEMMs vs vLLM's CPU GEMM) and one decode step's q·G of
    one token per prompt (gathering each request's G vs reading it in place from a paged state)."""
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config

    from plldr_hf.serving.vllm_g_state import PldrllmGState
    from plldr_hf.timing import interleaved_median_seconds

    config = learned_model.config
    h, d = config.num_attention_heads, config.head_dim
    with set_current_vllm_config(VllmConfig()):
        layer = PldrllmGState(config, slice(0, h), prefix="changes.g_state")
    mha = learned_model.decoder.dec_layers[0].mha1
    layer.load_state_dict(
        {k: v for k, v in mha.state_dict().items() if k.split(".")[0] in dict(layer.named_children())}
    )
    generator = torch.Generator().manual_seed(3)
    queries = [torch.randn(len(p), h, d, generator=generator) for p in prompts]
    layer.pack_weights()
    on_vllm_gemm = layer.run_units

    def prefill(run_units):
        def run():
            layer.run_units = run_units
            layer.g_of(queries)

        return run

    # a paged state as vLLM lays it out (slot stride 8 × H·d·d here), the requests in scattered slots
    slots = torch.randperm(4 * len(prompts), generator=generator)[: len(prompts)]
    buffer = torch.randn(4 * len(prompts) * 8 * h * d * d, generator=generator)
    states = torch.as_strided(buffer, (4 * len(prompts), h, d, d), (8 * h * d * d, d * d, d, 1))
    layer.kv_cache = (states,)
    q = torch.randn(len(prompts), h, d, generator=generator)
    with torch.no_grad():
        # the contenders of each change alternate round by round (`interleaved_median_seconds`)
        timings = interleaved_median_seconds(
            {"prefill G, torch GEMMs (s)": prefill(None), "prefill G, vLLM CPU GEMM (s)": prefill(on_vllm_gemm)}, 5
        )
        decode = interleaved_median_seconds(
            {
                "decode q·G, gather (ms)": lambda: torch.matmul(q[:, :, None, :], states[slots])[:, :, 0],
                "decode q·G, in place (ms)": lambda: layer.project_decodes(q, slots),
            },
            20,
        )
    timings.update({name: 1e3 * seconds for name, seconds in decode.items()})
    return timings


def plot(results: list[dict], path: Path) -> None:
    serving_plot(results, path, CONTENDERS, "PLDR-LLM 110M, float32 CPU: learned G in vLLM")


def markdown(results: list[dict], meta: dict) -> str:
    learned, collapsed, hf = CONTENDERS
    lines = [
        "# Serving a learned G: vLLM's per-request G state vs the collapsed model in vLLM and HF generate",
        "",
        f"Weights: {meta['weights']}.",
        "",
        "| requests × prompt tokens × new tokens | " + " | ".join(CONTENDERS) + " | learned vLLM / collapsed vLLM "
        "(FLOP bound; share of the bound) | learned vLLM / learned HF | tokens equal to `generate()` alone: "
        + ", ".join(CONTENDERS)
        + " |",
        "|---|" + "---|" * (len(CONTENDERS) + 3),
    ]
    for r in results:
        t, eq = r["tok_s"], r["equal"]
        ratio = t[learned] / t[collapsed]
        lines.append(
            f"| {r['label']} × {r['new_tokens']} | "
            + " | ".join(f"{t[name]:.1f} tok/s" for name in CONTENDERS)
            + f" | {ratio:.2f} ({r['flop_ratio']:.2f}; {ratio / r['flop_ratio']:.2f}) | {t[learned] / t[hf]:.2f} | "
            + ", ".join(f"{eq[name]}/{r['requests']}" for name in CONTENDERS)
            + " |"
        )
    profiled = [r for r in results if "gemm_seconds" in r]
    if profiled:
        lines += ["", f"oneDNN GEMMs of one batch of the {learned} engine under `torch.profiler` (`--profile`):", ""]
        lines += [
            "| requests × prompt tokens | the model's GEMMs: s, GFLOP/s | the metric learner's units: s, GFLOP/s |",
            "|---|---|---|",
        ]
        for r in profiled:
            gemm, flops = r["gemm_seconds"], r["flops"]
            lines.append(
                f"| {r['label']} | {gemm['model']:.2f}, {flops['linear'] / gemm['model'] / 1e9:.0f} | "
                f"{gemm['units']:.2f}, {flops['units'] / gemm['units'] / 1e9:.0f} |"
            )
    lines += ["", "Each change on its own (layer 0 of the metric learner, the 64-request short workload):", ""]
    lines += ["| measured | median |", "|---|---|"]
    lines += [f"| {name} | {value:.3f} |" for name, value in meta["changes"].items()]
    lines += [
        "",
        f"Median of {meta['rounds']} rounds after a warm-up round, contenders rotated per round; short prompts: 8–96 "
        "random token ids; long prompts: windows of the embedded Shakespeare text; greedy, end token ignored. PLDR-LLM "
        f"{meta['parameters'] / 1e6:.1f}M parameters. Both vLLM engines run without chunked prefill and prefix caching "
        "(what a learned G needs), with the same token budget per step, each with a 2 GiB KV cache; every contender "
        "runs in a process of its own. "
        f"{meta['machine']}, load average {meta['load_at_start']} at the start, torch {meta['torch']}, transformers "
        f"{meta['transformers']}, vLLM {meta['vllm']}.",
        "",
        f"Per-round tok/s: `{meta['stem']}.json`. Plot: `{meta['stem']}.png`.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(*argv[1:])
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    args = parse_arguments(argv, __doc__.split("\n\n")[0], "vllm_learned_g", FLAGS)
    if args.quick:
        args.long_prompts, args.long_requests = [64], 2
    import torch

    torch.set_num_threads(args.threads)
    work = Path(args.work_dir)
    if bool(args.model) != bool(args.calibration):
        raise SystemExit("error: --model and --calibration go together (the texts collapse() must accept it on)")
    if args.model:
        from transformers import AutoConfig

        import plldr_hf  # noqa: F401  (registers the family, so its saved remote code is not needed)

        trained = AutoConfig.from_pretrained(args.model)
        sizes, tokenizer_dir = {"vocab_size": trained.vocab_size}, Path(args.model)
    else:
        (sizes, extra), tokenizer_dir = model_sizes(args.quick), TOKENIZER
    workloads = [(f"{n} × 8–96", make_requests(n, sizes["vocab_size"])) for n in args.requests]
    workloads += [
        (f"{args.long_requests} × {n}", text_prompts(args.long_requests, n, sizes["vocab_size"], tokenizer_dir))
        for n in args.long_prompts
    ]
    longest = max(len(p) for _, prompts in workloads for p in prompts) + args.new_tokens
    max_len = max(MAX_MODEL_LEN, longest)
    if args.model:
        if longest > trained.max_position_embeddings:
            raise SystemExit(
                f"error: prompts plus new tokens need {longest} positions, --model has "
                f"{trained.max_position_embeddings}; give shorter --long-prompts"
            )
        max_len = trained.max_position_embeddings
        models = trained_models(work, args.model, args.calibration)
    else:
        models = build_models(work, sizes, extra, max_len)
    seqs = max(len(prompts) for _, prompts in workloads)
    kinds = {
        CONTENDERS[0]: ("vllm", "learned"),
        CONTENDERS[1]: ("vllm", "collapsed"),
        CONTENDERS[2]: ("hf", "learned"),
    }
    workers = {
        name: Worker(kind, models[model][0], max_len, seqs, args.threads) for name, (kind, model) in kinds.items()
    }
    results = []
    for label, prompts in workloads:
        print(f"{label} tokens × {args.new_tokens} new", file=sys.stderr, flush=True)
        runs = {name: functools.partial(workers[name], prompts, args.new_tokens) for name in CONTENDERS}
        times, outputs = rotated_rounds(runs, args.rounds)
        alone = {name: hf_alone(models[name][1], prompts, args.new_tokens) for name in ("learned", "collapsed")}
        reference = dict(zip(CONTENDERS, (alone["learned"], alone["collapsed"], alone["learned"])))
        results.append(
            {
                "label": label,
                "requests": len(prompts),
                "prompt_tokens": [len(p) for p in prompts],
                "new_tokens": args.new_tokens,
                **throughput(times, len(prompts) * args.new_tokens),
                "equal": {name: sum(a == b for a, b in zip(outputs[name], reference[name])) for name in CONTENDERS},
                "flop_ratio": serving_bound(models["learned"][1].config, [len(p) for p in prompts], args.new_tokens),
            }
        )
        if args.profile:
            results[-1]["gemm_seconds"] = workers[CONTENDERS[0]].gemm_seconds(prompts, args.new_tokens)
            results[-1]["flops"] = serving_flops(
                models["learned"][1].config, [len(p) for p in prompts], args.new_tokens
            )
        print(json.dumps(results[-1]["tok_s"]), json.dumps(results[-1]["equal"]), file=sys.stderr, flush=True)
    for process in workers.values():
        process.close()
    stem = f"{args.stem}_quick" if args.quick else args.stem
    meta = {
        "rounds": args.rounds,
        "parameters": sum(p.numel() for p in models["learned"][1].parameters()),
        **machine_and_versions(),
        "load_at_start": load,
        "weights": f"{args.model}, collapsed on {args.calibration}"
        if args.model
        else "random, the released 110M size",
        "changes": change_timings(models["learned"][1], workloads[len(args.requests) - 1][1]),
        "quick": args.quick,
        "stem": stem,
    }
    write_report(Path(args.report_dir), stem, markdown(results, meta), meta, results, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
