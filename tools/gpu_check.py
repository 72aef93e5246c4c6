"""One prepared GPU check: every `gpu`-marked test, then PLDR-LLM against an equal-size Llama in bf16, the metric
learner's three paths, AGF's flex PCM-V path against eager, and the reference fixture on CUDA.

    bash tools/gpu_check.sh OUT_DIR              # on a CUDA machine: installs the carried wheels, then runs this
    python tools/gpu_check.py --out OUT_DIR --dry-run   # anywhere: the plan, the wheel list and the output format

Writes `OUT_DIR/gpu_check.md` (tables) and `OUT_DIR/gpu_check.json` (every number), and prints one line per stage
with the elapsed time. Each stage has a time estimate (`PLAN`); a stage that would run past `--budget-s` is skipped
and reported as skipped, so the whole check ends inside its budget (8 minutes on one H200 by default).

How the estimates were made (seconds on one H200, bf16 at ~790 TFLOP/s measured on this kind of machine): the
110M model's training step at batch 8 × 1,024 is 6 · 1.1e8 · 8,192 ≈ 5.4 TFLOP plus the attention and the metric
learner, ≈ 30 ms at 25 % of peak; 3 contenders × 12 steps with two DAG settings is under 10 s. Greedy decoding is
launch-bound in eager PyTorch (≈ 15–25 ms per token for 5 layers with the metric learner at prefill): 3 contenders ×
2 batch sizes × 4 runs × 64 tokens ≈ 40 s. The `gpu` tests and the flex path are dominated by compilation
(≈ 20–40 s per compiled shape, measured on a CPU for the flex mask path: ~40 s), and `torch.compile` of the metric
learner by one compilation (≈ 30 s). The budget leaves a third of the 8 minutes as margin for the install and slow
compiles.

`--cpu-smoke` runs every measurement stage on the CPU at tiny sizes (the test suite does this, so the code that runs
on the GPU has run before it gets there); flex and `torch.compile` contenders are reported as skipped there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WHEELS_FILE = ROOT / "tools" / "gpu_wheels.txt"
BUDGET_S = 480.0


@dataclass(frozen=True)
class Stage:
    key: str
    title: str
    estimate_s: float
    needs_cuda: bool = True


PLAN = (
    Stage("environment", "versions and the device", 5, needs_cuda=False),
    Stage("gpu_tests", "every `gpu`-marked test (pytest -m gpu)", 90),
    Stage("fixtures", "reference fixture logits on CUDA, float32, against the CPU values", 10),
    Stage("pldrllm_vs_llama", "PLDR-LLM 110M vs an equal-size Llama, bf16, context 1,024", 120),
    Stage("metric_learner", "metric learner alone: fused units vs module path vs torch.compile", 45),
    Stage("agf_flex", "AGF PCM-V: flex path vs eager, source lengths 256 / 1,024 / 4,096", 60),
)

# sizes of the measurements: the papers' 110M PLDR-LLM at context 1,024 on the GPU, tiny ones for the CPU smoke run
SIZES = {
    "gpu": dict(preset="110m", vocab=32000, context=1024, train_batch=8, score_batch=8, prompt=128, new_tokens=64,
                decode_batches=(1, 32), rounds=4, agf_lengths=(256, 1024, 4096), agf_batch=2, agf_target=64,
                agf_preset="base", ml_batch=64, ml_length=256),
    "cpu": dict(preset="tiny", vocab=512, context=64, train_batch=2, score_batch=2, prompt=8, new_tokens=4,
                decode_batches=(1, 2), rounds=1, agf_lengths=(16, 32, 64), agf_batch=1, agf_target=8,
                agf_preset="tiny", ml_batch=2, ml_length=16),
}  # fmt: skip


def read_wheels(path: Path = WHEELS_FILE) -> list[tuple[str, str]]:
    """The pinned `name==version` lines of the wheel list (comments and blank lines skipped)."""
    pins = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)", line)
        if match is None:
            raise ValueError(f"{path}:{number}: expected NAME==VERSION, got {line!r}")
        pins.append((match.group(1), match.group(2)))
    return pins


def check_wheels(pins: list[tuple[str, str]]) -> list[str]:
    """Problems of the wheel list against this package's requirements (empty when it is consistent)."""
    import tomllib
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    problems = []
    names = [canonicalize_name(name) for name, _ in pins]
    if len(set(names)) != len(names):
        problems.append("a package is listed twice (two versions stop the whole install)")
    pinned = {canonicalize_name(name): Version(version) for name, version in pins}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for text in project["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name in pinned and pinned[name] not in requirement.specifier:
            problems.append(f"{requirement.name}=={pinned[name]} does not satisfy the package's {text!r}")
    if "transformers" not in pinned:
        problems.append(
            "transformers is not in the list: the device image's transformers is older than the package needs"
        )
    return problems


class Recorder:
    """Stage lines on stdout with the elapsed time; results and skips gathered for the JSON and Markdown files."""

    def __init__(self, budget_s: float):
        self.start = time.perf_counter()
        self.budget_s = budget_s
        self.results: dict = {}
        self.skipped: dict = {}

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def say(self, message: str) -> None:
        print(f"[{self.elapsed():6.1f} s] {message}", flush=True)

    def fits(self, stage: Stage) -> bool:
        return self.elapsed() + stage.estimate_s <= self.budget_s


def interleaved_ms(runs: dict, rounds: int, sync) -> dict[str, float]:
    """Median milliseconds per contender, the device synchronised around each run; one warm-up each, then rounds in
    serpentine order (`plldr_hf.timing.interleaved`)."""
    from plldr_hf.timing import interleaved

    def synced(run):
        def call():
            sync()
            run()
            sync()

        return call

    _, results = interleaved({key: synced(run) for key, run in runs.items()}, rounds)
    return {key: 1000 * statistics.median(values) for key, values in results.items()}


def _device_tools(device: str):
    import torch

    cuda = device == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def reset_peak():
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def peak_mib():
        return torch.cuda.max_memory_allocated() / 2**20 if cuda else None

    return sync, reset_peak, peak_mib


def stage_environment(device: str, sizes: dict) -> dict:
    import torch
    import transformers

    import plldr_hf

    info = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "plldr_hf": plldr_hf.__version__,
        "device": device,
    }
    if device == "cuda":
        info.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    return info


def stage_gpu_tests(device: str, sizes: dict, out: Path) -> dict:
    """`pytest -m gpu` in a subprocess; its counts from the JUnit XML."""
    import xml.etree.ElementTree as ElementTree

    junit = out / "gpu_tests.xml"
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q", "-rA", "tests",
               f"--junitxml={junit}"]  # fmt: skip
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    (out / "gpu_tests.log").write_text(proc.stdout + proc.stderr)
    cases = []
    if junit.exists():
        for case in ElementTree.parse(junit).getroot().iter("testcase"):
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                node = case.find(tag)
                if node is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    outcome += f": {(node.get('message') or '').splitlines()[0][:200]}" if node.get("message") else ""
            cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                          "seconds": float(case.get("time", 0))})  # fmt: skip
    return {"exit_code": proc.returncode, "tests": cases}


def stage_fixtures(device: str, sizes: dict) -> dict:
    """The tiny_v51 reference checkpoint's logits on `device` in float32 against the author's CPU values."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    folder = ROOT / "tests" / "fixtures" / "pldrllm_reference" / "tiny_v51"
    expected = load_file(folder / "expected.safetensors")
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").to(device).eval()
    results = {}
    for backend in ("eager", "sdpa"):
        model.set_attn_implementation(backend)
        with torch.no_grad():
            logits = model(expected["input_ids"].to(device), use_cache=False).logits.float().cpu()
        results[backend] = (logits - expected["logits"]).abs().max().item()
    return {"max_abs_logit_diff": results, "tolerance": 1e-4, "ok": all(v <= 1e-4 for v in results.values())}


def _pldr_and_llama(sizes: dict, device: str):
    import torch
    from transformers import LlamaForCausalLM

    from benchmarks.generate_speed import llama_config
    from plldr_hf import PldrllmConfig, PldrllmForCausalLM
    from plldr_hf.training.recipes import model_fields

    fields = model_fields("pldrllm", sizes["preset"])
    torch.manual_seed(0)
    config = PldrllmConfig(vocab_size=sizes["vocab"], max_position_embeddings=sizes["context"], **fields)
    config._attn_implementation = "sdpa"
    pldr = PldrllmForCausalLM(config).to(device)
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "intermediate_size")
    common = {k: getattr(config, k) for k in keys}
    lconfig = llama_config(common, sizes["context"], pad_token_id=0, bos_token_id=2, eos_token_id=3)
    lconfig._attn_implementation = "sdpa"
    llama = LlamaForCausalLM(lconfig).to(device)
    return config, pldr, llama


def stage_pldrllm_vs_llama(device: str, sizes: dict) -> dict:
    """Training step (bf16 autocast, DAG term on and off), scoring without cache and greedy decoding (bf16 weights),
    each with the PLDR-LLM / Llama ratio and its FLOP bound (`benchmarks/flops.py`)."""
    import copy

    import torch

    from benchmarks.flops import decode_bound, scoring_bound, training_bound

    sync, reset_peak, peak_mib = _device_tools(device)
    config, pldr, llama = _pldr_and_llama(sizes, device)
    rounds = sizes["rounds"]
    generator = torch.Generator().manual_seed(0)
    batch, context = sizes["train_batch"], sizes["context"]
    ids = torch.randint(3, config.vocab_size, (batch, context), generator=generator).to(device)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    results = {
        "sizes": {k: v for k, v in sizes.items() if not isinstance(v, tuple)},
        "dtype": "bf16" if device == "cuda" else "float32",
    }

    def train_step(model, dag: bool):
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        extra = {"dag_weights": (0.01, 0.01, 0.01)} if dag else {}

        def run():
            with torch.autocast(device, dtype=dtype, enabled=device == "cuda"):
                loss = model(ids, labels=ids, use_cache=False, **extra).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return run

    contenders = {
        "pldrllm_learned_g": train_step(pldr, dag=False),
        "pldrllm_learned_g_dag": train_step(pldr, dag=True),
        "llama": train_step(llama, dag=False),
    }
    train_ms = interleaved_ms(contenders, rounds, sync)
    train_peak = {}
    for key, run in contenders.items():
        reset_peak()
        run()
        sync()
        train_peak[key] = peak_mib()
    bound = training_bound(config, batch, context, recompute=config.metric_learner_checkpointing)
    results["train"] = {
        "ms": train_ms,
        "peak_mib": train_peak,
        "ratio": {k: train_ms[k] / train_ms["llama"] for k in train_ms if k != "llama"},
        "flop_bound": bound,
    }

    pldr.eval().to(dtype)
    llama.eval().to(dtype)
    collapsed = copy.deepcopy(pldr)
    # random weights are not input-invariant: forced, with two short calibration inputs (speed only)
    collapsed.collapse([[config.eos_token_id], [5, 6, 7, 8]], force=True)
    models = {"pldrllm_learned_g": pldr, "pldrllm_collapsed": collapsed, "llama": llama}

    score_ids = ids[: sizes["score_batch"]]

    def scorer(model):
        def run():
            with torch.no_grad():
                model(score_ids, use_cache=False)

        return run

    score_ms = interleaved_ms({k: scorer(m) for k, m in models.items()}, rounds, sync)
    results["scoring"] = {
        "ms": score_ms,
        "ratio": {k: score_ms[k] / score_ms["llama"] for k in score_ms if k != "llama"},
        "flop_bound": {"pldrllm_learned_g": scoring_bound(config, *score_ids.shape), "pldrllm_collapsed": 1.0},
    }

    results["decode"] = {}
    for decode_batch in sizes["decode_batches"]:
        prompt = torch.randint(3, config.vocab_size, (decode_batch, sizes["prompt"]), generator=generator).to(device)
        new = sizes["new_tokens"]

        def greedy(model, prompt=prompt, new=new):
            def run():
                with torch.no_grad():
                    model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False)

            return run

        ms = interleaved_ms({k: greedy(m) for k, m in models.items()}, rounds, sync)
        results["decode"][f"batch_{decode_batch}"] = {
            "tok_s": {k: decode_batch * new / (v / 1000) for k, v in ms.items()},
            "ratio": {k: ms[k] / ms["llama"] for k in ms if k != "llama"},
            "flop_bound": {
                "pldrllm_learned_g": decode_bound(config, decode_batch, sizes["prompt"], new),
                "pldrllm_collapsed": 1.0,
            },
        }
    return results


def stage_metric_learner(device: str, sizes: dict) -> dict:
    """One layer's metric learner on Gram matrices of `ml_batch` sequences: fused units, module path, and the module
    path with `torch.compile` (forward + backward, and forward alone)."""
    import torch

    from plldr_hf import PldrllmConfig
    from plldr_hf.models.pldrllm.modeling_pldrllm import PldrllmAttention, metric_learner
    from plldr_hf.training.recipes import model_fields

    sync, _, _ = _device_tools(device)
    config = PldrllmConfig(vocab_size=sizes["vocab"], **model_fields("pldrllm", sizes["preset"]))
    attention = PldrllmAttention(config, 0).to(device)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(sizes["ml_batch"], config.num_attention_heads, sizes["ml_length"], config.head_dim,
                    generator=generator).to(device) / 16  # fmt: skip
    a0 = (q.transpose(-1, -2) @ q).requires_grad_(True)
    grad_out = torch.randn(a0.shape, generator=generator).to(device)
    paths = {"fused": dict(), "modules": dict(fused=False)}
    if device == "cuda":
        paths["compiled"] = dict(fused=False, run_units=attention._compiled_units())

    def train(kwargs):
        def run():
            metric_learner(a0, attention.layernorm1, attention.reslayerAs, **kwargs).backward(grad_out)
            a0.grad = None
            attention.zero_grad(set_to_none=True)

        return run

    def forward(kwargs):
        def run():
            with torch.no_grad():
                metric_learner(a0, attention.layernorm1, attention.reslayerAs, **kwargs)

        return run

    rounds = max(3, sizes["rounds"] * 3)
    train_ms = interleaved_ms({k: train(v) for k, v in paths.items()}, rounds, sync)
    forward_ms = interleaved_ms({k: forward(v) for k, v in paths.items()}, rounds, sync)
    with torch.no_grad():
        reference = metric_learner(a0, attention.layernorm1, attention.reslayerAs, fused=False)
        diffs = {
            k: (metric_learner(a0, attention.layernorm1, attention.reslayerAs, **v) - reference).abs().max().item()
            for k, v in paths.items()
        }
    skipped = {} if device == "cuda" else {"compiled": "torch.compile is measured on CUDA only"}
    return {"train_ms": train_ms, "forward_ms": forward_ms, "max_abs_diff_vs_modules": diffs, "skipped": skipped}


def stage_agf_flex(device: str, sizes: dict) -> dict:
    """Training step (forward + backward) of the AGF + PCM-V translator at each source length: peak memory and
    time of the flex path and of eager, and their loss difference."""
    import torch

    from plldr_hf import AgfConfig, AgfForConditionalGeneration
    from plldr_hf.training.recipes import model_fields

    sync, reset_peak, peak_mib = _device_tools(device)
    lengths = sizes["agf_lengths"]
    torch.manual_seed(0)
    config = AgfConfig(
        vocab_size=sizes["vocab"], position_encoding="agf", pcmv=True, max_position_embeddings=max(lengths),
        dropout=0.0, **model_fields("agf", sizes["agf_preset"]),
    )  # fmt: skip
    model = AgfForConditionalGeneration(config).to(device).train()
    backends = ["eager"] + (["flex_attention"] if device == "cuda" else [])
    generator = torch.Generator().manual_seed(0)
    rows = []
    for length in lengths:
        src = torch.randint(3, config.vocab_size, (sizes["agf_batch"], length), generator=generator).to(device)
        tgt = torch.randint(3, config.vocab_size, (sizes["agf_batch"], sizes["agf_target"]), generator=generator)
        tgt = tgt.to(device)
        row = {"source_length": length}
        for backend in backends:
            model.set_attn_implementation(backend)

            def step(src=src, tgt=tgt):
                model.zero_grad(set_to_none=True)
                loss = model(input_ids=src, labels=tgt).loss
                loss.backward()
                return loss.item()

            step()  # compilation and the allocator's first growth
            reset_peak()
            row[f"{backend}_loss"] = step()
            sync()
            row[f"{backend}_peak_mib"] = peak_mib()
            row[f"{backend}_ms"] = interleaved_ms({backend: step}, max(1, sizes["rounds"]), sync)[backend]
        rows.append(row)
    skipped = {} if device == "cuda" else {"flex_attention": "flex has no backward on the CPU build of torch"}
    return {"rows": rows, "skipped": skipped}


STAGES = {
    "environment": stage_environment,
    "fixtures": stage_fixtures,
    "pldrllm_vs_llama": stage_pldrllm_vs_llama,
    "metric_learner": stage_metric_learner,
    "agf_flex": stage_agf_flex,
}


def _f(value, spec=".3g") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


def markdown(report: dict) -> str:
    """The tables of the report; every stage that did not run says why."""
    r, env = report["results"], report["results"].get("environment", {})
    lines = [
        "# GPU check",
        "",
        f"Run {report['date']} on {env.get('gpu', env.get('device', 'n/a'))}: torch {env.get('torch', 'n/a')}, CUDA "
        f"{env.get('cuda', 'n/a')}, transformers {env.get('transformers', 'n/a')}, plldr_hf "
        f"{env.get('plldr_hf', 'n/a')}; {report['elapsed_s']:.0f} s of a {report['budget_s']:.0f} s budget"
        + (" (dry run: nothing measured)" if report["dry_run"] else "")
        + (" (CPU smoke run at tiny sizes: the numbers are not the GPU's)" if report["cpu_smoke"] else "")
        + ".",
        "",
        "## Plan",
        "",
        "| stage | what | estimate (s) | status |",
        "|---|---|---|---|",
    ]
    for stage in PLAN:
        status = "ran" if stage.key in r else f"skipped: {report['skipped'].get(stage.key, 'not run')}"
        lines.append(f"| `{stage.key}` | {stage.title} | {stage.estimate_s:.0f} | {status} |")
    if "gpu_tests" in r:
        lines += ["", "## `gpu`-marked tests", "", f"pytest exit code {r['gpu_tests']['exit_code']}.", "",
                  "| test | outcome | s |", "|---|---|---|"]  # fmt: skip
        lines += [f"| `{t['test']}` | {t['outcome']} | {t['seconds']:.1f} |" for t in r["gpu_tests"]["tests"]]
    if "fixtures" in r:
        f = r["fixtures"]
        lines += ["", "## Reference fixture on the device (float32)", "",
                  "| backend | max abs logit diff vs the CPU reference | ≤ 1e-4 |", "|---|---|---|"]  # fmt: skip
        lines += [f"| {k} | {_f(v)} | {v <= f['tolerance']} |" for k, v in f["max_abs_logit_diff"].items()]
    if "pldrllm_vs_llama" in r:
        p = r["pldrllm_vs_llama"]
        t, dtype = p["train"], p["dtype"]
        lines += ["", "## PLDR-LLM vs Llama (equal size)", "",
                  "| workload | contender | time | PLDR / Llama | FLOP bound | peak MiB |", "|---|---|---|---|---|---|"]  # fmt: skip
        for key, ms in t["ms"].items():
            ratio = t["ratio"].get(key)
            lines.append(
                f"| training step ({dtype} autocast) | {key} | {ms:.1f} ms | {_f(ratio, '.2f')} | "
                f"{_f(t['flop_bound'] if ratio else None, '.2f')} | {_f(t['peak_mib'][key], '.0f')} |"
            )
        s = p["scoring"]
        for key, ms in s["ms"].items():
            ratio = s["ratio"].get(key)
            lines.append(
                f"| scoring, no cache ({dtype}) | {key} | {ms:.1f} ms | {_f(ratio, '.2f')} | "
                f"{_f(s['flop_bound'].get(key), '.2f')} | |"
            )
        for name, d in p["decode"].items():
            for key, tok_s in d["tok_s"].items():
                ratio = d["ratio"].get(key)
                lines.append(
                    f"| greedy decoding, {name.replace('_', ' ')} ({dtype}) | {key} | {tok_s:.0f} tok/s | "
                    f"{_f(ratio, '.2f')} (time) | {_f(d['flop_bound'].get(key), '.2f')} | |"
                )
    if "metric_learner" in r:
        m = r["metric_learner"]
        lines += ["", "## Metric learner alone", "", "| path | train (fwd + bwd) ms | forward ms | max abs diff vs modules |",
                  "|---|---|---|---|"]  # fmt: skip
        for key in m["train_ms"]:
            lines.append(
                f"| {key} | {m['train_ms'][key]:.2f} | {m['forward_ms'][key]:.2f} | "
                f"{_f(m['max_abs_diff_vs_modules'][key])} |"
            )
        lines += [f"| {key} | skipped: {why} | | |" for key, why in m["skipped"].items()]
    if "agf_flex" in r:
        a = r["agf_flex"]
        lines += ["", "## AGF + PCM-V training step: flex vs eager", "",
                  "| source length | eager ms | eager peak MiB | flex ms | flex peak MiB | loss diff |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for row in a["rows"]:
            diff = abs(row["flex_attention_loss"] - row["eager_loss"]) if "flex_attention_loss" in row else None
            lines.append(
                f"| {row['source_length']} | {_f(row.get('eager_ms'), '.1f')} | {_f(row.get('eager_peak_mib'), '.0f')} "
                f"| {_f(row.get('flex_attention_ms'), '.1f')} | {_f(row.get('flex_attention_peak_mib'), '.0f')} "
                f"| {_f(diff)} |"
            )
        lines += [f"\n{key}: skipped ({why})" for key, why in a["skipped"].items()]
    return "\n".join(lines) + "\n"


def write_report(out: Path, report: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("gpu_check.json", json.dumps(report, indent=1, default=str) + "\n"),
                       ("gpu_check.md", markdown(report))):  # fmt: skip
        staging = out / f".{name}.partial"
        staging.write_text(text)
        os.replace(staging, out / name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tools/gpu_check.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu_check.md / gpu_check.json")
    parser.add_argument("--dry-run", action="store_true", help="check the plan, the wheel list and the output only")
    parser.add_argument("--cpu-smoke", action="store_true", help="run the measurements on the CPU at tiny sizes")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="skip stages that would end past this")
    parser.add_argument("--only", nargs="+", choices=[s.key for s in PLAN], help="run these stages only")
    args = parser.parse_args(argv)
    if not (math.isfinite(args.budget_s) and args.budget_s > 0):
        parser.error(f"--budget-s must be a positive number of seconds, got {args.budget_s}")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out} is a file; give a folder")

    recorder = Recorder(args.budget_s)
    planned = sum(stage.estimate_s for stage in PLAN)
    recorder.say(f"plan: {len(PLAN)} stages, estimated {planned:.0f} s of a {args.budget_s:.0f} s budget")
    if planned > args.budget_s:
        print(f"error: the plan's estimate {planned:.0f} s exceeds the budget {args.budget_s:.0f} s", file=sys.stderr)
        return 2
    pins = read_wheels()
    problems = check_wheels(pins)
    recorder.say(f"wheel list: {len(pins)} pinned packages in {WHEELS_FILE.relative_to(ROOT)}")
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2

    import torch

    cuda = torch.cuda.is_available() and not args.cpu_smoke
    device = "cuda" if cuda else "cpu"
    sizes = SIZES["gpu" if cuda else "cpu"]
    for stage in PLAN:
        if args.only and stage.key not in args.only:
            recorder.skipped[stage.key] = "not selected (--only)"
            continue
        if args.dry_run and stage.key != "environment":
            recorder.skipped[stage.key] = "dry run"
            continue
        if stage.key == "gpu_tests" and not cuda:
            recorder.skipped[stage.key] = "no CUDA device (the tests skip themselves there)"
            recorder.say(f"{stage.key}: skipped (no CUDA device)")
            continue
        if stage.needs_cuda and not cuda and not args.cpu_smoke:
            recorder.skipped[stage.key] = "no CUDA device"
            recorder.say(f"{stage.key}: skipped (no CUDA device)")
            continue
        if not recorder.fits(stage):
            recorder.skipped[stage.key] = f"budget: {recorder.elapsed():.0f} s + estimate {stage.estimate_s:.0f} s"
            recorder.say(f"{stage.key}: skipped ({recorder.skipped[stage.key]})")
            continue
        recorder.say(f"{stage.key}: {stage.title} ...")
        try:
            if stage.key == "gpu_tests":
                recorder.results[stage.key] = stage_gpu_tests(device, sizes, args.out)
            else:
                recorder.results[stage.key] = STAGES[stage.key](device, sizes)
        except Exception as error:  # one failing stage must not cost the others' numbers
            recorder.skipped[stage.key] = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:300]}"
            recorder.say(f"{stage.key}: FAILED ({recorder.skipped[stage.key]})")
            continue
        recorder.say(f"{stage.key}: done")
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "dry_run": args.dry_run,
        "cpu_smoke": args.cpu_smoke,
        "budget_s": args.budget_s,
        "elapsed_s": recorder.elapsed(),
        "plan": [stage.__dict__ for stage in PLAN],
        "wheels": [f"{name}=={version}" for name, version in pins],
        "results": recorder.results,
        "skipped": recorder.skipped,
    }
    write_report(args.out, report)
    recorder.say(f"wrote {args.out / 'gpu_check.md'} and {args.out / 'gpu_check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
