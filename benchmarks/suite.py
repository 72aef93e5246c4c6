"""Benchmark suite: every workload of the performance issue, our models against equal-size Transformers
baselines, measured in one process with the contenders alternating.

Workloads (full sizes; `--quick` shrinks every model and input to a smoke run):

| key | workload | contenders |
|---|---|---|
| `decode_b1` | greedy decode, batch 1, prompt 128, 48 new tokens | PLDR collapsed (DynamicCache; StaticCache eager; StaticCache + `torch.compile`), PLDR uncollapsed (KV + G cache), `LlamaForCausalLM` (DynamicCache; StaticCache + `torch.compile`) |
| `decode_b8` | the same, batch 8, 32 new tokens | the same |
| `scoring` | forward without cache, batch 16 × 32 tokens (lm-eval log-likelihood) | PLDR uncollapsed (metric learner; compiled units), PLDR collapsed, Llama, GEMM floor |
| `train` | training step, forward + backward, batch 4 × 256, SDPA; peak memory of each contender in a fresh process | PLDR default (fused units, pre-activations recomputed in backward), fused units with stored activations, compiled module path, default + DAG term, Llama, GEMM floor |
| `train_small` | the same at the `small` training size (4 layers × 256 wide) | PLDR default, Llama, GEMM floor |
| `agf_attention` | one self-attention module, forward + backward, batch 16 × 128, eager | AGF + PCM-V, AGF, sinusoidal |
| `agf_train` | translation training step, forward + backward, batch 16, 64 source and 64 target tokens | AGF + PCM-V, AGF, sinusoidal (eager), `MarianMTModel` (SDPA) |
| `agf_decode` | greedy translation, batch 8, 32 source tokens, 32 new tokens | AGF + PCM-V, sinusoidal, `MarianMTModel` |

Sizes: PLDR-LLM and Llama as in `benchmarks/generate_speed.py` (hidden 896, 5 layers, 14 heads × 64, intermediate
2389, vocab 32000; Llama with biases and an untied head); the AGF family and Marian at the translation "base" size
(d_model 512, 3 + 3 layers, 8 heads, FFN 2048, ReLU, vocab 8000, tied embeddings). float32, random weights (speed
does not depend on the values); the collapsed model is `collapse(force=True)` of the uncollapsed one.

Protocol: per workload, one warm-up run per contender (it includes `torch.compile`'s compilation, reported as
"first run"), then `repeats` rounds in which every contender runs once, in turn, so load from other processes
affects them alike. Reported: median wall time (and min–max), median process CPU time (all threads; with
`--threads 1` it is nearly independent of other processes' load), tokens/s for decoding, the largest extra heap in
use during a run (glibc `mallinfo2`, `generate_speed.HeapPeak`) next to the weights, and the ratios the issue sets
targets for, with the FLOP bound of each PLDR-LLM ratio computed from the config (`benchmarks/flops.py`). The GEMM
floor (`gemm_floor`) is Llama's run followed by the metric learner's matrix products alone, in their real shapes on
random operands: the ratio PLDR-LLM would reach if nothing but those GEMMs cost time. Numbers are reported, never
asserted.

    python -m benchmarks run                     # full protocol; writes benchmarks/results.md and results.json
    python -m benchmarks run --quick             # tiny sizes, well under 2 minutes (CI smoke)
    python -m benchmarks run --only scoring train --threads 1 --profile
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import generate_speed
from plldr_hf.timing import interleaved


RESULTS_DIR = Path(__file__).resolve().parent
DEFAULT_OUTPUT = RESULTS_DIR / "results"  # .md and .json
DEFAULT_QUICK_OUTPUT = RESULTS_DIR / "runs" / "quick" / "results"  # runs/ is git-ignored


def pldr_sizes(mode: str) -> dict:
    """PLDR-LLM / Llama sizes of the decode benchmark (the 110m preset at full size), so both suites measure the same
    models."""
    return generate_speed.full_sizes() if mode == "full" else dict(generate_speed.QUICK)


def small_sizes(mode: str) -> dict:
    """The `small` size of `plldr-hf train pldrllm` (`plldr_hf.training.options.PRESETS["pldrllm"]["small"]`, its
    vocabulary included) at full size; the quick sizes otherwise. Read when needed, so listing workloads imports no
    torch."""
    if mode == "quick":
        return dict(generate_speed.QUICK)
    from plldr_hf.training.options import PRESETS
    from plldr_hf.training.recipes import model_fields

    return dict(model_fields("pldrllm", "small"), vocab_size=PRESETS["pldrllm"]["small"]["run"]["vocab_size"])


def agf_sizes(mode: str) -> dict:
    """AGF sizes: the `base` preset of `plldr_hf.training.options.PRESETS` (Transformer-base at the AGF paper's
    3 + 3 layers) with the default vocabulary of `plldr-hf train agf` at full size; a tiny model otherwise."""
    if mode == "quick":
        return dict(
            vocab_size=300,
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
        )
    from plldr_hf.training.options import TranslationOptions
    from plldr_hf.training.recipes import model_fields

    return dict(vocab_size=TranslationOptions().vocab_size, **model_fields("agf", "base"))


# workload shapes and repeats
PROTOCOL = {
    "full": dict(
        decode_b1=dict(batch=1, prompt=128, new_tokens=48, repeats=3),
        decode_b8=dict(batch=8, prompt=128, new_tokens=32, repeats=5),
        scoring=dict(batch=16, length=32, repeats=7),
        train=dict(batch=4, length=256, repeats=5),
        train_small=dict(batch=4, length=256, repeats=5),
        agf_attention=dict(batch=16, length=128, repeats=7),
        agf_train=dict(batch=16, source=64, target=64, repeats=5),
        agf_decode=dict(batch=8, source=32, new_tokens=32, repeats=3),
    ),
    "quick": dict(
        decode_b1=dict(batch=1, prompt=16, new_tokens=8, repeats=2),
        decode_b8=dict(batch=2, prompt=16, new_tokens=8, repeats=2),
        scoring=dict(batch=4, length=16, repeats=2),
        train=dict(batch=2, length=32, repeats=2),
        train_small=dict(batch=2, length=32, repeats=2),
        agf_attention=dict(batch=2, length=16, repeats=2),
        agf_train=dict(batch=2, source=12, target=10, repeats=2),
        agf_decode=dict(batch=2, source=8, new_tokens=6, repeats=2),
    ),
}
WORKLOADS = ("decode_b1", "decode_b8", "scoring", "train", "train_small", "agf_attention", "agf_train", "agf_decode")
# any positive DAG weight switches the term on; its cost does not depend on the value
DAG_WEIGHTS = (0.005, 0.005, 0.005)
HEAP_INTERVAL = 2e-3


@dataclass
class Contender:
    key: str
    label: str
    run: Callable[[], None]
    tokens: int | None = None  # generated tokens per run (decoding), for tokens/s
    weights: int | None = None  # bytes of parameters and buffers
    compiled: bool = False
    fresh_memory: bool = True  # a training contender `benchmarks.memory` can rebuild in a fresh process


@dataclass
class Ratio:
    """`numerator / denominator` of the contenders' median times (`kind="time"`) or speeds (`kind="speed"`)."""

    label: str
    numerator: str
    denominator: str
    # "time": ratio of times (× time); "speed": ratio of tokens/s (× speed); "speedup": denominator/numerator time;
    # "memory": ratio of the peak extra memory measured in fresh processes
    kind: str
    target: float | None = None
    op: str | None = None  # ">=" or "<="
    value: float | None = None  # from the median wall times: the reported ratio, the one the target is about
    value_cpu: float | None = None  # the same from the median process CPU times (robust to other processes' load)
    value_min: float | None = None  # the same from each contender's fastest run: the least-loaded estimate
    # the median over rounds of the ratio within a round (the contenders of a round run back to back, so a slow
    # phase of the machine slows both): robust to load that drifts between rounds
    value_paired: float | None = None
    # the interquartile range of those within-round ratios: how far one round's ratio strays on this machine
    paired_iqr: tuple[float, float] | None = None
    met: bool | None = None
    # the target lies inside `paired_iqr`: whether it is met is not decided at this machine's noise
    within_noise: bool | None = None
    bound: float | None = None  # the FLOP bound of a time ratio, from the config (`benchmarks/flops.py`)

    def evaluate(self, measured: dict) -> None:
        num, den = measured[self.numerator], measured[self.denominator]
        if self.kind == "memory":
            self.value = num["fresh_peak_bytes"] / den["fresh_peak_bytes"]
        else:
            for key, attribute in (("median_s", "value"), ("cpu_s", "value_cpu"), ("min_s", "value_min")):
                if self.kind == "speed":
                    value = (num["tokens"] / num[key]) / (den["tokens"] / den[key])
                elif self.kind == "speedup":
                    value = den[key] / num[key]
                else:
                    value = num[key] / den[key]
                setattr(self, attribute, value)
            pairs = [n / d for n, d in zip(num["runs_s"], den["runs_s"])]
            if self.kind == "speed":  # equal token counts per run: speed ratio = inverse time ratio
                pairs = [(num["tokens"] / den["tokens"]) / p for p in pairs]
            elif self.kind == "speedup":
                pairs = [1 / p for p in pairs]
            self.value_paired = statistics.median(pairs)
            if len(pairs) > 1:
                low, _, high = statistics.quantiles(pairs, n=4, method="inclusive")
                self.paired_iqr = (low, high)
        if self.target is not None:
            self.met = self.value >= self.target if self.op == ">=" else self.value <= self.target
            if self.paired_iqr is not None:
                self.within_noise = self.paired_iqr[0] <= self.target <= self.paired_iqr[1]

    @property
    def unit(self) -> str:
        return {"time": "× time", "speed": "× speed", "speedup": "× faster", "memory": "× memory"}[self.kind]


@dataclass
class Workload:
    key: str
    title: str
    protocol: dict
    contenders: list[Contender]
    ratios: list[Ratio]
    notes: list[str] = field(default_factory=list)
    measured: dict = field(default_factory=dict)
    wall_s: float = 0.0  # the whole workload: warm-ups, repeats, profiling
    size: str | None = None  # "full" / "quick": the sizes its fresh-process memory runs rebuild


# ---------------------------------------------------------------------------------------------------------------
# models


class Models:
    """Builds each model once, on first use, and frees the ones no later workload needs."""

    def __init__(self, mode: str):
        self.mode = mode
        self._cache: dict = {}
        self.parameters: dict[str, int] = {}

    def pldr(self) -> dict:
        """{"collapsed", "uncollapsed", "llama"} models, from `generate_speed.build_models`."""
        if "pldr" not in self._cache:
            # max_position_embeddings max(1024, …): longer than every input here
            sizes = dict(pldr_sizes(self.mode), new_tokens=0)
            models = generate_speed.build_models(sizes, ["collapsed", "uncollapsed", "llama"], prompt_len=0)
            self.parameters.update(
                {"PLDR-LLM": _parameter_count(models["uncollapsed"]), "Llama": _parameter_count(models["llama"])}
            )
            self._cache["pldr"] = models
        return self._cache["pldr"]

    def agf(self) -> dict:
        """{"pcmv", "agf", "sinusoidal": AgfForConditionalGeneration, "marian": MarianMTModel}."""
        if "agf" not in self._cache:
            import torch
            from transformers import MarianConfig, MarianMTModel

            from plldr_hf import AgfConfig, AgfForConditionalGeneration

            sizes = agf_sizes(self.mode)
            models = {}
            for key, overrides in (
                ("pcmv", dict(position_encoding="agf", pcmv=True)),
                ("agf", dict(position_encoding="agf")),
                ("sinusoidal", dict(position_encoding="sinusoidal")),
            ):
                torch.manual_seed(0)
                config = AgfConfig(**sizes, **overrides)
                config._attn_implementation = "eager"
                models[key] = AgfForConditionalGeneration(config).eval()
            torch.manual_seed(0)
            marian = MarianConfig(
                **sizes,
                decoder_vocab_size=sizes["vocab_size"],
                activation_function="relu",
                scale_embedding=True,
                max_position_embeddings=1024,
                pad_token_id=0,
                bos_token_id=1,
                eos_token_id=2,
                decoder_start_token_id=1,
                forced_eos_token_id=None,
                share_encoder_decoder_embeddings=True,
                tie_word_embeddings=True,
            )
            marian._attn_implementation = "sdpa"
            models["marian"] = MarianMTModel(marian).eval()
            self.parameters.update(
                {"AGF + PCM-V": _parameter_count(models["pcmv"]), "Marian": _parameter_count(models["marian"])}
            )
            self._cache["agf"] = models
        return self._cache["agf"]

    def release(self, name: str) -> None:
        self._cache.pop(name, None)
        gc.collect()


def _parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------------------------
# workloads


def random_ids(batch: int, length: int, vocab: int, seed: int):
    import torch

    return torch.randint(4, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _compile_config():
    from transformers import CompileConfig

    # generate() compiles the decode step only for a compileable cache (StaticCache); CPU needs the opt-in flag
    config = CompileConfig(fullgraph=False, dynamic=False, mode="default")
    config._compile_all_devices = True
    return config


def _greedy(model, ids, new_tokens: int, **extra) -> Callable[[], None]:
    import torch

    mask = torch.ones_like(ids)

    def run():
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                num_beams=1,
                pad_token_id=0,
                **extra,
            )
        assert out.shape[-1] >= new_tokens, out.shape

    return run


def decode_workload(key: str, models: Models, protocol: dict, compile_decode: bool) -> Workload:
    m = models.pldr()
    batch, prompt, new = protocol["batch"], protocol["prompt"], protocol["new_tokens"]
    ids = random_ids(batch, prompt, pldr_sizes(models.mode)["vocab_size"], seed=1 if batch == 1 else 8)
    tokens = batch * new
    static = dict(cache_implementation="static", disable_compile=True)
    contenders = [
        Contender("collapsed", "PLDR collapsed, DynamicCache", _greedy(m["collapsed"], ids, new), tokens),
        Contender("uncollapsed", "PLDR uncollapsed, KV + G cache", _greedy(m["uncollapsed"], ids, new), tokens),
        Contender("llama", "Llama, DynamicCache", _greedy(m["llama"], ids, new), tokens),
        Contender(
            "collapsed_static",
            "PLDR collapsed, StaticCache (eager)",
            _greedy(m["collapsed"], ids, new, **static),
            tokens,
        ),
    ]
    from benchmarks import flops

    ratios = [
        Ratio("collapsed / Llama", "collapsed", "llama", "speed", 1.0 if batch == 1 else 0.95, ">="),
        Ratio(
            "uncollapsed (KV + G cache) / Llama",
            "uncollapsed",
            "llama",
            "time",
            1.2 if batch > 1 else 1 / 0.95,
            "<=",
            bound=flops.decode_bound(m["uncollapsed"].config, batch, prompt, new),
        ),
        Ratio("collapsed StaticCache eager / DynamicCache", "collapsed_static", "collapsed", "speed"),
    ]
    if compile_decode:
        compiled = dict(cache_implementation="static", compile_config=_compile_config())
        contenders += [
            Contender(
                "collapsed_compiled",
                "PLDR collapsed, StaticCache + torch.compile",
                _greedy(m["collapsed"], ids, new, **compiled),
                tokens,
                compiled=True,
            ),
            Contender(
                "llama_compiled",
                "Llama, StaticCache + torch.compile",
                _greedy(m["llama"], ids, new, **compiled),
                tokens,
                compiled=True,
            ),
        ]
        ratios += [
            Ratio("collapsed compiled / collapsed eager", "collapsed_compiled", "collapsed", "speed"),
            Ratio("collapsed compiled / Llama compiled", "collapsed_compiled", "llama_compiled", "speed"),
        ]
    model_of = {"uncollapsed": "uncollapsed", "llama": "llama", "llama_compiled": "llama"}
    for contender in contenders:
        contender.weights = generate_speed.weight_bytes(m[model_of.get(contender.key, "collapsed")])
    notes = [
        f"tokens/s = {batch} × {new} new tokens / wall time of one `generate()` call (prefill of the {prompt}-token "
        "prompt included); greedy, EOS suppressed (`min_new_tokens`)",
        "uncollapsed: the metric learner runs once per prompt (prefill), every decode step reuses the cached G",
    ]
    if compile_decode:
        notes.append(
            "torch.compile: `generate(cache_implementation='static', compile_config=CompileConfig(fullgraph=False, "
            "dynamic=False, mode='default'))` with `_compile_all_devices=True` (transformers compiles only the decode "
            "step, on accelerators by default); the compile time is in the first run"
        )
    title = f"greedy decode, batch {batch}, prompt {prompt}, {new} new tokens"
    return Workload(key, title, protocol, contenders, ratios, notes)


def scoring_workload(models: Models, protocol: dict) -> Workload:
    import torch

    from benchmarks import flops

    m = models.pldr()
    ids = random_ids(protocol["batch"], protocol["length"], pldr_sizes(models.mode)["vocab_size"], seed=16)

    def forward(model, compiled_units: bool | None = None):
        def run():
            if compiled_units is not None:
                model.config.metric_learner_compile = compiled_units
            with torch.no_grad():
                model(input_ids=ids, use_cache=False)

        return run

    contenders = [
        Contender("uncollapsed", "PLDR uncollapsed (metric learner)", forward(m["uncollapsed"], False)),
        Contender("collapsed", "PLDR collapsed (fixed G)", forward(m["collapsed"])),
        Contender("llama", "Llama", forward(m["llama"])),
        Contender("uncollapsed_compiled", "PLDR uncollapsed, compiled units", forward(m["uncollapsed"], True)),
    ]
    for contender, key in zip(contenders, ("uncollapsed", "collapsed", "llama", "uncollapsed")):
        contender.weights = generate_speed.weight_bytes(m[key])
    contenders.append(gemm_floor(m["uncollapsed"].config, protocol["batch"], contenders[2].run, backward=False))
    bound = flops.scoring_bound(m["uncollapsed"].config, protocol["batch"], protocol["length"])
    ratios = [
        Ratio("collapsed speed-up over uncollapsed", "collapsed", "uncollapsed", "speedup", 3.5, ">="),
        Ratio("collapsed / Llama", "collapsed", "llama", "time", 1.10, "<="),
        Ratio(
            "uncollapsed / Llama",
            "uncollapsed",
            "llama",
            "time",
            2.2,
            "<=",
            bound=bound,
        ),
        Ratio("uncollapsed, compiled units / Llama", "uncollapsed_compiled", "llama", "time", bound=bound),
        Ratio("GEMM floor: Llama + the metric learner's GEMMs / Llama", "gemm_floor", "llama", "time", bound=bound),
    ]
    notes = ["one forward over the whole batch, logits of every position, `use_cache=False`, no grad"]
    title = f"scoring forward, batch {protocol['batch']} × {protocol['length']} tokens, no cache"
    return Workload("scoring", title, protocol, contenders, ratios, notes)


# the training contenders' settings: (metric_learner_checkpointing, metric_learner_compile, DAG term on)
PLDR_SETTINGS = {
    "pldr": (True, False, False),  # the defaults
    "pldr_fast": (False, True, False),  # compiled units (the module path), activations stored
    "pldr_store": (False, False, False),  # the fused units with their activations stored
    "pldr_dag": (True, False, True),  # the defaults with the DAG regulariser on
}


def configure_pldr(model, contender: str) -> None:
    """Set a PLDR-LLM's config to the contender's settings (`PLDR_SETTINGS`); the contenders share one model."""
    checkpointing, compiled, dag = PLDR_SETTINGS[contender]
    config = model.config
    config.metric_learner_checkpointing, config.metric_learner_compile = checkpointing, compiled
    config.dag_weight_a_lm, config.dag_weight_a_p, config.dag_weight_g_lm = DAG_WEIGHTS if dag else (0.0, 0.0, 0.0)


def training_step(model, ids, contender: str | None = None) -> Callable[[], None]:
    """One forward + backward of the causal-LM loss (labels = inputs) in training mode, gradients freed after."""

    def run():
        if contender is not None:
            configure_pldr(model, contender)
        try:
            model.train()
            model.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids).loss.backward()
        finally:
            model.zero_grad(set_to_none=True)
            model.eval()

    return run


def fresh_process_peaks(contenders: list[str], size: str, protocol: dict, threads: int) -> dict[str, int]:
    """Peak extra heap of one training step per contender, each in its own fresh process (`benchmarks/memory.py`)."""
    import subprocess

    peaks = {}
    for contender in contenders:
        command = [sys.executable, "-m", "benchmarks.memory", contender, size]
        command += [str(protocol["batch"]), str(protocol["length"]), str(threads)]
        proc = subprocess.run(command, capture_output=True, text=True, cwd=RESULTS_DIR.parent, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"memory run of {contender} failed:\n{proc.stderr[-3000:]}")
        peaks[contender.removesuffix("_small")] = json.loads(proc.stdout.strip().splitlines()[-1])["peak_extra_bytes"]
    return peaks


def _train_contenders(pldr, llama, ids, *, small: bool = False) -> list[Contender]:
    labels = {
        "pldr": "PLDR-LLM, default settings (units recomputed in backward, DAG off)",
        "pldr_fast": "PLDR-LLM, compiled units, activations stored (DAG off)",
        "pldr_store": "PLDR-LLM, fused units, activations stored (DAG off)",
        "pldr_dag": "PLDR-LLM, default settings, DAG term on",
    }
    keys = ("pldr",) if small else ("pldr", "pldr_store", "pldr_fast", "pldr_dag")
    contenders = [
        Contender(k, labels[k], training_step(pldr, ids, k), weights=generate_speed.weight_bytes(pldr)) for k in keys
    ]
    llama_step = training_step(llama, ids)
    contenders.append(Contender("llama", "Llama", llama_step, weights=generate_speed.weight_bytes(llama)))
    contenders.append(gemm_floor(pldr.config, ids.shape[0], llama_step, backward=True))
    return contenders


def gemm_floor(config, batch: int, llama_run: Callable[[], None], *, backward: bool) -> Contender:
    """Llama's run, then the metric learner's matrix products alone (`flops.unit_gemm_shapes`, default settings) on
    random operands: what PLDR-LLM would cost if everything it adds but those GEMMs (elementwise work, norms, the
    Gram matrix, the power law, dispatch) were free. Measured in the same rounds, so the ratio to Llama is the
    floor these GEMM shapes reach on this machine, beside the FLOP bound (which assumes Llama's GFLOP/s)."""
    import torch

    from benchmarks import flops
    from plldr_hf.models.pldrllm.fused_units import FUSED_BLOCK_ROWS

    shapes = flops.unit_gemm_shapes(config, batch, backward=backward, recompute=True, block=FUSED_BLOCK_ROWS)
    generator = torch.Generator().manual_seed(6)
    operands = {
        shape: (
            torch.randn(shape[0], shape[1], generator=generator),
            torch.randn(shape[2], shape[1], generator=generator),
        )
        for shape in set(shapes)
    }
    outputs = {shape: torch.empty(shape[0], shape[2]) for shape in operands}

    def run():
        llama_run()
        for shape in shapes:
            left, right = operands[shape]
            torch.mm(left, right.t(), out=outputs[shape])

    label = "Llama, then the metric learner's GEMMs alone (default settings, random operands)"
    return Contender("gemm_floor", label, run, fresh_memory=False)


def train_workload(models: Models, protocol: dict) -> Workload:
    from benchmarks import flops

    m = models.pldr()
    pldr, llama = m["uncollapsed"], m["llama"]
    ids = random_ids(protocol["batch"], protocol["length"], pldr_sizes(models.mode)["vocab_size"], seed=4)
    config, shape = pldr.config, (protocol["batch"], protocol["length"])
    recomputed, stored = flops.training_bound(config, *shape, True), flops.training_bound(config, *shape, False)
    ratios = [
        Ratio("default / Llama", "pldr", "llama", "time", 1.2, "<=", bound=recomputed),
        Ratio("activations stored / Llama", "pldr_store", "llama", "time", 1.15, "<=", bound=stored),
        Ratio("compiled units / Llama", "pldr_fast", "llama", "time", bound=stored),
        Ratio("DAG on / Llama", "pldr_dag", "llama", "time", bound=recomputed),
        Ratio(
            "GEMM floor: Llama + the metric learner's GEMMs / Llama", "gemm_floor", "llama", "time", bound=recomputed
        ),
        Ratio("peak memory, default / Llama", "pldr", "llama", "memory", 1.3, "<="),
        Ratio("peak memory, activations stored / Llama", "pldr_store", "llama", "memory"),
    ]
    notes = [
        "forward + backward of the causal-LM loss (labels = inputs), SDPA, no optimizer step (it costs the same "
        "per parameter for both); gradients freed after each step",
        "default settings: `metric_learner_checkpointing=True` (the fused units keep each GLU's input and recompute "
        "its pre-activations in backward); activations stored: `metric_learner_checkpointing=False`; compiled "
        "units: `metric_learner_compile=True` (the module path), activations stored, the compile time is in the "
        "first run",
        f"DAG term on: weights {DAG_WEIGHTS} on (A_LM, A_P, G_LM); the regulariser of every layer, batch item and "
        "head through `plldr_hf.models.pldrllm.dag.log_mean_trace_exp`",
        "peak memory: the largest extra heap during one step, each contender in a fresh process "
        "(`python -m benchmarks.memory`), over the loaded model",
        "FLOP bound: (PLDR-LLM FLOPs) / (Llama FLOPs) of the step from the config (`benchmarks/flops.py`), with the "
        "recomputation where the setting recomputes",
    ]
    title = f"training step (fwd + bwd), batch {protocol['batch']} × {protocol['length']} tokens, SDPA"
    return Workload("train", title, protocol, _train_contenders(pldr, llama, ids), ratios, notes, size=models.mode)


def train_small_workload(models: Models, protocol: dict) -> Workload:
    from benchmarks import flops

    sizes = dict(small_sizes(models.mode), new_tokens=0)
    built = generate_speed.build_models(sizes, ["uncollapsed", "llama"], prompt_len=0)
    pldr, llama = built["uncollapsed"], built["llama"]
    ids = random_ids(protocol["batch"], protocol["length"], sizes["vocab_size"], seed=4)
    bound = flops.training_bound(pldr.config, protocol["batch"], protocol["length"], True)
    ratios = [
        Ratio("default / Llama", "pldr", "llama", "time", 1.4, "<=", bound=bound),
        Ratio("GEMM floor: Llama + the metric learner's GEMMs / Llama", "gemm_floor", "llama", "time", bound=bound),
    ]
    notes = [
        "the `small` size of `plldr-hf train pldrllm` (4 layers × 256 wide, 4 heads × 64, the released 8-unit "
        "metric learner of 64→170→64 GLUs) against a Llama of the same shape; default settings, DAG off",
    ]
    title = f"training step at the `small` size, batch {protocol['batch']} × {protocol['length']} tokens, SDPA"
    contenders = _train_contenders(pldr, llama, ids, small=True)
    return Workload("train_small", title, protocol, contenders, ratios, notes)


def agf_attention_workload(models: Models, protocol: dict) -> Workload:
    import torch

    m = models.agf()
    batch, length = protocol["batch"], protocol["length"]
    d_model = agf_sizes(models.mode)["d_model"]
    hidden = torch.randn(batch, length, d_model, generator=torch.Generator().manual_seed(5))
    from plldr_hf.models.agf.positions import self_attention_context

    positions = torch.arange(length).expand(batch, length)

    def step(model):
        attention = model.model.encoder.layers[0].self_attn
        context = self_attention_context(model.config, positions, positions, attention.num_heads)

        def run():
            attention.train()
            x = hidden.clone().requires_grad_()
            out, _ = attention(x, attention_mask=None, positions=context)
            out.sum().backward()
            attention.zero_grad(set_to_none=True)
            attention.eval()

        return run

    contenders = [
        Contender("pcmv", "AGF + PCM-V attention (eager)", step(m["pcmv"])),
        Contender("agf", "AGF attention (eager)", step(m["agf"])),
        Contender("sinusoidal", "sinusoidal model's attention (eager, no position term)", step(m["sinusoidal"])),
    ]
    for contender in contenders:
        attention = m[contender.key].model.encoder.layers[0].self_attn
        contender.weights = sum(t.numel() * t.element_size() for t in attention.parameters())
    ratios = [
        Ratio("AGF + PCM-V / sinusoidal", "pcmv", "sinusoidal", "time", 1.3, "<="),
        Ratio("AGF / sinusoidal", "agf", "sinusoidal", "time"),
    ]
    notes = [
        "encoder layer 0's self-attention module alone (projections, scores, position terms, softmax, PCM-V, output "
        "projection), forward + backward, no padding; the sinusoidal model adds its position vectors to the "
        "embeddings, so its attention is plain scaled-dot-product attention on the same eager path"
    ]
    title = f"AGF attention module (fwd + bwd), batch {batch} × {length} tokens, eager"
    return Workload("agf_attention", title, protocol, contenders, ratios, notes)


def agf_train_workload(models: Models, protocol: dict) -> Workload:
    m = models.agf()
    vocab = agf_sizes(models.mode)["vocab_size"]
    source = random_ids(protocol["batch"], protocol["source"], vocab, seed=6)
    labels = random_ids(protocol["batch"], protocol["target"], vocab, seed=7)

    def step(model):
        def run():
            model.train()
            model.zero_grad(set_to_none=True)
            out = model(input_ids=source, labels=labels)
            out.loss.backward()
            model.zero_grad(set_to_none=True)
            model.eval()

        return run

    contenders = [
        Contender("pcmv", "AGF + PCM-V (eager)", step(m["pcmv"])),
        Contender("agf", "AGF (eager)", step(m["agf"])),
        Contender("sinusoidal", "sinusoidal (eager)", step(m["sinusoidal"])),
        Contender("marian", "MarianMTModel (SDPA)", step(m["marian"])),
    ]
    for contender in contenders:
        contender.weights = generate_speed.weight_bytes(m[contender.key])
    ratios = [
        Ratio("AGF + PCM-V / sinusoidal", "pcmv", "sinusoidal", "time"),
        Ratio("AGF / sinusoidal", "agf", "sinusoidal", "time"),
        Ratio("sinusoidal / Marian", "sinusoidal", "marian", "time"),
    ]
    notes = [
        "forward + backward of the translation loss (decoder inputs = labels shifted right), dropout 0.1 as "
        "configured, no padding, no optimizer step"
    ]
    title = (
        f"translation training step (fwd + bwd), batch {protocol['batch']}, {protocol['source']} source / "
        f"{protocol['target']} target tokens"
    )
    return Workload("agf_train", title, protocol, contenders, ratios, notes)


def agf_decode_workload(models: Models, protocol: dict) -> Workload:
    m = models.agf()
    batch, new = protocol["batch"], protocol["new_tokens"]
    source = random_ids(batch, protocol["source"], agf_sizes(models.mode)["vocab_size"], seed=9)
    contenders = [
        Contender(key, label, _greedy(m[key], source, new), batch * new)
        for key, label in (
            ("pcmv", "AGF + PCM-V (eager)"),
            ("sinusoidal", "sinusoidal (eager)"),
            ("marian", "MarianMTModel (SDPA)"),
        )
    ]
    for contender in contenders:
        contender.weights = generate_speed.weight_bytes(m[contender.key])
    ratios = [
        Ratio("AGF + PCM-V / Marian", "pcmv", "marian", "speed"),
        Ratio("sinusoidal / Marian", "sinusoidal", "marian", "speed"),
        Ratio("AGF + PCM-V / sinusoidal", "pcmv", "sinusoidal", "speed"),
    ]
    notes = [f"tokens/s = {batch} × {new} new tokens / wall time of `generate()` (encoder included); greedy"]
    title = f"greedy translation, batch {batch}, {protocol['source']} source tokens, {new} new tokens"
    return Workload("agf_decode", title, protocol, contenders, ratios, notes)


# ---------------------------------------------------------------------------------------------------------------
# measurement


def _timed(run: Callable[[], None]) -> tuple[float, float, int]:
    with generate_speed.HeapPeak(HEAP_INTERVAL) as heap:
        cpu = time.process_time()
        start = time.perf_counter()
        run()
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
    return wall, cpu, heap.peak


def _graph_breaks() -> int:
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover
        return 0
    return sum(counters["graph_break"].values())


def measure(workload: Workload, repeats: int, log) -> None:
    """Warm-up per contender, then `repeats` rounds over all contenders; fills `workload.measured`."""
    breaks, before = {}, [0]

    def measure_one(run):
        # graph breaks of a compiled contender happen in its first (warm-up) run
        before[0] = _graph_breaks()
        return _timed(run)

    def on_result(key, index, result):
        if index is None:
            breaks[key] = _graph_breaks() - before[0]
            log(f"  warm-up {key}: {result[0]:.2f} s")
        else:
            log(f"  round {index + 1}/{repeats} {key}: {result[0]:.3f} s")

    runs = {contender.key: contender.run for contender in workload.contenders}
    warm, results = interleaved(runs, repeats, measure_one, on_result)
    first = {key: result[0] for key, result in warm.items()}
    walls = {key: [r[0] for r in values] for key, values in results.items()}
    cpus = {key: [r[1] for r in values] for key, values in results.items()}
    peaks = {key: max((r[2] for r in values), default=0) for key, values in results.items()}
    for contender in workload.contenders:
        wall = walls[contender.key]
        result = dict(
            label=contender.label,
            median_s=statistics.median(wall),
            min_s=min(wall),
            max_s=max(wall),
            cpu_s=statistics.median(cpus[contender.key]),
            first_run_s=first[contender.key],
            peak_extra_bytes=peaks[contender.key],
            weight_bytes=contender.weights,
            runs_s=wall,
        )
        if contender.tokens:
            result["tokens_per_s"] = contender.tokens / result["median_s"]
            result["tokens"] = contender.tokens
        if contender.compiled:
            result["graph_breaks"] = breaks[contender.key]
        workload.measured[contender.key] = result
    if any(ratio.kind == "memory" for ratio in workload.ratios):
        import torch

        keys = [c.key for c in workload.contenders if c.fresh_memory]
        log(f"  peak memory of {keys}, each in a fresh process")
        peaks = fresh_process_peaks(keys, workload.size, workload.protocol, torch.get_num_threads())
        for key, peak in peaks.items():
            workload.measured[key]["fresh_peak_bytes"] = peak
    for ratio in workload.ratios:
        ratio.evaluate(workload.measured)


def profile_workload(workload: Workload, rows: int) -> str:
    """torch.profiler table (self CPU time) of one run per eager contender."""
    from torch.profiler import ProfilerActivity, profile

    parts = []
    for contender in workload.contenders:
        if contender.compiled:
            continue
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            contender.run()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=48)
        parts.append(f"#### {contender.label}\n\n```\n{table}\n```")
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# report


def verdict(ratio: Ratio) -> str:
    if ratio.target is None:
        return "—"
    text = ("✓" if ratio.met else "✗") + f" ({ratio.op} {ratio.target:g})"
    return text + (", within noise" if ratio.within_noise else "")


def _speed(result: dict) -> str:
    if "tokens_per_s" in result:
        return f"{result['tokens_per_s']:.1f} tok/s"
    return f"{result['median_s']:.3f} s"


def summary_table(workloads: list[Workload]) -> list[str]:
    """One row per ratio: what the issue's targets are about."""
    lines = [
        "| workload | ours | baseline | ratio | ratio from CPU time | ratio of minima | paired ratio (IQR) | FLOP bound "
        "| target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    mib = 2**20
    for workload in workloads:
        for ratio in workload.ratios:
            num, den = workload.measured[ratio.numerator], workload.measured[ratio.denominator]
            if ratio.kind == "memory":
                ours, base = f"{num['fresh_peak_bytes'] / mib:.0f} MiB", f"{den['fresh_peak_bytes'] / mib:.0f} MiB"
            else:
                ours, base = _speed(num), _speed(den)
            cpu = "—" if ratio.value_cpu is None else f"{ratio.value_cpu:.2f}"
            fastest = "—" if ratio.value_min is None else f"{ratio.value_min:.2f}"
            paired = "—" if ratio.value_paired is None else f"{ratio.value_paired:.2f}"
            if ratio.paired_iqr is not None:
                paired += " ({:.2f}–{:.2f})".format(*ratio.paired_iqr)
            bound = "—" if ratio.bound is None else f"{ratio.bound:.2f}"
            lines.append(
                f"| {workload.title}: {ratio.label} | {num['label']}: {ours} | {den['label']}: {base} "
                f"| {ratio.value:.2f}{ratio.unit} | {cpu} | {fastest} | {paired} | {bound} | {verdict(ratio)} |"
            )
    return lines


def detail_table(workload: Workload) -> list[str]:
    mib = 2**20
    decode = any(c.tokens for c in workload.contenders)
    head = "| contender | " + ("tokens/s | " if decode else "")
    fresh = any("fresh_peak_bytes" in workload.measured.get(c.key, {}) for c in workload.contenders)
    head += "median s | min–max s | CPU s | first run s | weights MiB | peak extra MiB |"
    head += " peak extra MiB, fresh process |" if fresh else ""
    lines = [head, "|---|" + "---|" * (head.count("|") - 2)]
    for contender in workload.contenders:
        r = workload.measured[contender.key]
        cells = [r["label"]]
        if decode:
            cells.append(f"{r['tokens_per_s']:.1f}")
        first = f"{r['first_run_s']:.2f}"
        if "graph_breaks" in r:
            first += f" ({r['graph_breaks']} graph breaks)"
        cells += [
            f"{r['median_s']:.3f}",
            f"{r['min_s']:.3f}–{r['max_s']:.3f}",
            f"{r['cpu_s']:.3f}",
            first,
            f"{r['weight_bytes'] / mib:.1f}" if r["weight_bytes"] else "—",
            f"{r['peak_extra_bytes'] / mib:.1f}",
        ]
        if fresh:
            cells.append(f"{r['fresh_peak_bytes'] / mib:.1f}" if "fresh_peak_bytes" in r else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(meta: dict, workloads: list[Workload], profiles: dict) -> str:
    lines = [
        "# Benchmark suite: PLDR-LLM and AGF against equal-size Transformers baselines",
        "",
        f"- command: `{meta['command']}`"
        + (" (**quick mode: tiny sizes, a smoke run, not a measurement**)" if meta["quick"] else ""),
        f"- {meta['date']}; {meta['machine']}, {meta['cpus']} CPUs visible, torch threads {meta['threads']}; torch "
        f"{meta['torch']}, transformers {meta['transformers']}; float32, random weights",
        f"- load average (1 min) {meta['load_before']:.2f} before, {meta['load_after']:.2f} after; wall time "
        f"{meta['wall_s']:.0f} s",
        f"- PLDR-LLM / Llama: {meta['pldr_sizes']}",
        f"- AGF / Marian: {meta['agf_sizes']}",
        f"- parameters: {meta['parameters']}",
        "- medians over the repeats after one warm-up run per contender, contenders alternating (in serpentine "
        "order: forward in odd rounds, backward in even ones); ratios of medians (the target is about these); ratio "
        "of minima: of each contender's fastest run, the estimate a loaded machine distorts least; "
        "paired ratio: the median over rounds of the ratio within one round, which a slow phase of a shared machine "
        'affects less, with the interquartile range of those ratios; "within noise": the target lies inside that '
        "range, so whether it is met is not decided by this run; numbers are reported, not asserted",
        "",
        "## Summary",
        "",
        *summary_table(workloads),
    ]
    if meta["load_before"] > meta["cpus"] or meta["load_after"] > meta["cpus"]:
        lines += [
            "",
            f"**Warning:** the load average exceeded the {meta['cpus']} CPUs during the run: other processes shared "
            "the cores, so wall times are noisy (the CPU-time column is less affected, with one torch thread).",
        ]
    for workload in workloads:
        lines += ["", f"## {workload.title} (`{workload.key}`)", ""]
        lines += [f"- {note}" for note in workload.notes]
        lines += [
            f"- repeats: {workload.protocol['repeats']}; the workload took {workload.wall_s:.0f} s",
            "",
            *detail_table(workload),
        ]
        if workload.key in profiles:
            lines += ["", "### Profile (one run each, self CPU time)", "", profiles[workload.key]]
    return "\n".join(lines) + "\n"


def to_json(meta: dict, workloads: list[Workload]) -> dict:
    return {
        "meta": meta,
        "workloads": [
            {
                "key": w.key,
                "title": w.title,
                "protocol": w.protocol,
                "notes": w.notes,
                "wall_s": w.wall_s,
                "contenders": w.measured,
                "ratios": [{**asdict(r), "unit": r.unit} for r in w.ratios],
            }
            for w in workloads
        ],
    }


# ---------------------------------------------------------------------------------------------------------------
# entry point


def build_workload(key: str, models: Models, protocol: dict, compile_decode: bool) -> Workload:
    if key in ("decode_b1", "decode_b8"):
        return decode_workload(key, models, protocol, compile_decode)
    return {
        "scoring": scoring_workload,
        "train": train_workload,
        "train_small": train_small_workload,
        "agf_attention": agf_attention_workload,
        "agf_train": agf_train_workload,
        "agf_decode": agf_decode_workload,
    }[key](models, protocol)


def run(args) -> tuple[dict, list[Workload], str]:
    import torch
    import transformers

    mode = "quick" if args.quick else "full"
    if args.threads:
        torch.set_num_threads(args.threads)
    selected = [key for key in WORKLOADS if not args.only or key in args.only]
    protocols = {key: dict(PROTOCOL[mode][key]) for key in selected}
    if args.repeats is not None:
        for protocol in protocols.values():
            protocol["repeats"] = args.repeats
    models = Models(mode)

    def log(message: str) -> None:
        if args.verbose:
            print(message, file=sys.stderr, flush=True)

    start, load_before = time.perf_counter(), os.getloadavg()[0]
    workloads, profiles = [], {}
    for index, key in enumerate(selected):
        log(f"{key} ...")
        started = time.perf_counter()
        workload = build_workload(key, models, protocols[key], compile_decode=not args.no_compile)
        measure(workload, protocols[key]["repeats"], log)
        if args.profile:
            profiles[key] = profile_workload(workload, args.profile_rows)
        workload.wall_s = time.perf_counter() - started
        workloads.append(workload)
        later = selected[index + 1 :]
        if not any(k in later for k in ("decode_b1", "decode_b8", "scoring", "train", "train_small")):
            models.release("pldr")
        if not any(k.startswith("agf") for k in later):
            models.release("agf")

    pldr_keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim", "intermediate_size")
    pldr_keys += ("vocab_size", "A_dff", "num_reslayerA", "num_denseA")
    meta = dict(
        command=("python -m benchmarks run " + " ".join(args.argv)).strip(),
        quick=bool(args.quick),
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        machine=platform.processor() or platform.machine(),
        cpus=os.cpu_count(),
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        load_before=load_before,
        load_after=os.getloadavg()[0],
        wall_s=time.perf_counter() - start,
        pldr_sizes=", ".join(f"{k} {pldr_sizes(mode)[k]}" for k in pldr_keys),
        agf_sizes=", ".join(f"{k} {v}" for k, v in agf_sizes(mode).items()),
        parameters=", ".join(f"{k} {v / 1e6:.1f}M" for k, v in models.parameters.items()) or "—",
    )
    return meta, workloads, render(meta, workloads, profiles)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes and 2 repeats: a smoke run (< 2 min)")
    parser.add_argument("--only", nargs="+", choices=WORKLOADS, metavar="WORKLOAD", help=f"subset of {WORKLOADS}")
    parser.add_argument("--repeats", type=int, help="timed rounds per workload (default: per workload, 3–7)")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile decode contenders")
    parser.add_argument("--profile", action="store_true", help="append a torch.profiler table per contender")
    parser.add_argument("--profile-rows", type=int, default=12, help="rows per profiler table (default: 12)")
    parser.add_argument(
        "--output",
        help="output path without suffix; writes .md and .json (default: benchmarks/results, or "
        "benchmarks/runs/quick/results with --quick)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every run to stderr")
    args = parser.parse_args(argv)
    for name in ("repeats", "threads", "profile_rows"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.output and Path(args.output).is_dir():
        parser.error(f"--output {args.output} is a folder; give a path without suffix (FOLDER/results)")
    args.argv = list(argv)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    meta, workloads, text = run(args)
    print(text)
    output = Path(args.output) if args.output else (DEFAULT_QUICK_OUTPUT if args.quick else DEFAULT_OUTPUT)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".md").write_text(text)
    output.with_suffix(".json").write_text(json.dumps(to_json(meta, workloads), indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {output.with_suffix('.md')} and {output.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
