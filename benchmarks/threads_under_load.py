"""Training-step time against machine load, for 1 and 2 CPU threads and both OpenMP wait policies.

The quickstart's two stages train on a fixed number of threads (`--threads`, default 2) so that every machine gives
the same scores. On a busy machine, threads that wait for each other at every small matrix product can lose far more
than their share of the cores: OpenMP's default wait policy spins, so a waiting thread burns the time slice the
thread it waits for needs. This script measures the step of each stage's model (the quickstart's translator and its
PLDR-LLM, with their batch shapes) while 0, 1 or 3 other processes keep a core busy each, for 1 and 2 threads, with
OpenMP's default (spinning) wait, with `OMP_WAIT_POLICY=PASSIVE` (waiting threads sleep at once) and with a short
spin (`GOMP_SPINCOUNT=10000`). Every cell runs in a
fresh process (the policy is read when OpenMP starts); cells run in turn, and the table gives the median step.

    python benchmarks/threads_under_load.py            # writes benchmarks/results/threads_under_load.md
    python benchmarks/threads_under_load.py --quick    # fewer steps: a smoke run of the script

The thread count changes float rounding, so it stays fixed (the scores are the same on any machine); the wait policy
changes no arithmetic, only how threads wait.
"""

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path


DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "threads_under_load.md"
STAGES = ("translator", "pldrllm")
# how an OpenMP thread waits for the others: spin (the default of GNU OpenMP, torch's on Linux: about 300,000 polls
# before sleeping), sleep at once, or spin briefly (10,000 polls, a few microseconds) then sleep
POLICIES = {"spin": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"}, "short spin": {"GOMP_SPINCOUNT": "10000"}}


def _spin(stop) -> None:
    while not stop.is_set():
        sum(range(10_000))


def measure_steps(stage: str, steps: int) -> list[float]:
    """Seconds of each training step (forward, backward, AdamW) of one quickstart stage's model, in this process."""
    import torch

    import plldr_hf  # noqa: F401
    from plldr_hf.models.agf.position_encodings import POSITION_VARIANTS
    from plldr_hf.training.recipes import agf_config, pldrllm_config

    torch.manual_seed(0)
    if stage == "translator":
        from plldr_hf import AgfForConditionalGeneration

        fields = POSITION_VARIANTS["agf+pcmv+abs"][1]
        model = AgfForConditionalGeneration(agf_config("small", vocab_size=4000, **fields))
        batch = {
            "input_ids": torch.randint(4, 4000, (32, 30)),
            "attention_mask": torch.ones(32, 30, dtype=torch.long),
            "labels": torch.randint(4, 4000, (32, 30)),
        }
    else:
        from plldr_hf import PldrllmForCausalLM

        model = PldrllmForCausalLM(pldrllm_config("mini", 2048))
        ids = torch.randint(6, 2048, (8, 128))
        batch = {"input_ids": ids, "labels": ids}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    times = []
    for _ in range(steps + 3):
        start = time.perf_counter()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return times[3:]


def run_cell(stage: str, threads: int, policy: str, busy: int, steps: int) -> float:
    """Median step seconds of `stage` on `threads` threads with OpenMP wait `policy` while `busy` processes spin."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    env.pop("OMP_WAIT_POLICY", None)
    env.pop("GOMP_SPINCOUNT", None)
    env.update(POLICIES[policy])
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(busy)]
    for spinner in spinners:
        spinner.start()
    try:
        code = f"import json, sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r}); "
        code += "from benchmarks.threads_under_load import measure_steps; import torch; "
        code += f"torch.set_num_threads({threads}); print(json.dumps(measure_steps({stage!r}, {steps})))"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()
    return statistics.median(json.loads(result.stdout.strip().splitlines()[-1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 steps per cell")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per cell (default 8)")
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT))
    args = parser.parse_args(argv)
    steps = args.steps or (3 if args.quick else 8)
    loads = (0, 1, 3)
    results = {}
    for stage in STAGES:
        for threads in (1, 2):
            for policy in POLICIES:
                for busy in loads:
                    results[stage, threads, policy, busy] = run_cell(stage, threads, policy, busy, steps)
                    print(
                        f"{stage} threads {threads} {policy} busy {busy}: {1e3 * results[stage, threads, policy, busy]:.0f} ms",
                        flush=True,
                    )
    lines = [
        "# Training-step time against machine load",
        "",
        f"- command: `python benchmarks/threads_under_load.py {' '.join(argv if argv is not None else sys.argv[1:])}`".rstrip(),
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}; machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs; median of {steps} steps per cell after 3 warm-up steps",
        "- models: the quickstart's translator (AGF + PCM-V + absolute, `small`, 4,000-piece vocabulary, 32 pairs of 30 "
        "subwords) and its PLDR-LLM (`mini`, 8 blocks of 128 tokens); busy: processes spinning one core each",
        "",
        "| stage | threads | OpenMP wait | idle (ms/step) | 1 busy | 3 busy | 1 busy / idle | 3 busy / idle |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stage in STAGES:
        for threads in (1, 2):
            for policy in POLICIES:
                cells = [results[stage, threads, policy, busy] for busy in loads]
                lines.append(
                    f"| {stage} | {threads} | {policy} | {1e3 * cells[0]:.0f} | {1e3 * cells[1]:.0f} | {1e3 * cells[2]:.0f} "
                    f"| {cells[1] / cells[0]:.2f} | {cells[2] / cells[0]:.2f} |"
                )
    text = "\n".join(lines) + "\n"
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
