"""Streamed against in-memory pretraining on the same data: peak memory on 1x and 10x the corpus, and tokens/s.

Four contenders, each a `plldr-hf train pldrllm` run in its own process (peak resident memory from `os.wait4`):
`stream_1x`, `stream_10x` (`--streaming` over Parquet shards of the corpus and of ten copies of it), `memory_1x`,
`memory_10x` (the same files loaded and packed in memory). Every run trains the same model for the same steps with
one tokenizer trained beforehand (`--tokenizer`), so only the data path differs. The contenders run in turn, their
order rotated each round; the table gives medians over the rounds.

    python benchmarks/streaming.py            # Shakespeare x 1 and x 10, 3 rounds: writes benchmarks/results/streaming.md
    python benchmarks/streaming.py --quick    # a small corpus, 1 round: a smoke run of the script

Targets: peak memory of a streamed run on 10x the corpus ≤ 1.1 x that on 1x; streamed tokens/s ≥ 0.95 x in-memory.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "streaming.md"
CONTENDERS = ("stream_1x", "stream_10x", "memory_1x", "memory_10x")


def write_corpus(folder: Path, documents: list[str], copies: int, shards: int) -> list[str]:
    """`copies` numbered copies of `documents` in `shards` Parquet files per copy, and a validation file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    train, validation = documents[: len(documents) * 9 // 10], documents[len(documents) * 9 // 10 :]
    for copy in range(copies):
        for shard in range(shards):
            rows = [{"text": f"{copy}-{i}. {text}"} for i, text in enumerate(train) if i % shards == shard]
            pq.write_table(pa.Table.from_pylist(rows), folder / f"train-{copy:02d}-{shard:02d}.parquet")
    pq.write_table(pa.Table.from_pylist([{"text": t} for t in validation]), folder / "validation.parquet")
    return [str(folder / "train-*.parquet"), str(folder / "validation.parquet")]


def run_once(name: str, data: list[str], tokenizer: str, steps: int, work: Path) -> dict:
    """One training run in a child process: its peak resident memory (MiB) and training tokens/s."""
    out = work / f"{name}-run"
    command = [sys.executable, "-m", "plldr_hf", "train", "pldrllm", "--size", "tiny", "--tokenizer", tokenizer]
    command += ["--dataset", *data, "--output-dir", str(out), "--overwrite", "--max-steps", str(steps)]
    command += ["--max-train-documents", "100000000", "--eval-steps", "0", "--report-to", "none", "--no-progress"]
    command += ["--streaming"] if name.startswith("stream") else []
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    _, status, usage = os.wait4(child.pid, 0)
    errors = child.stderr.read()
    if status != 0:
        raise RuntimeError(f"{name} failed:\n{errors[-2000:]}")
    report = json.loads((out / "train_report.json").read_text())
    metrics = report["train_metrics"]
    return {
        "peak_mib": usage.ru_maxrss / 1024,
        "tokens_per_s": metrics["num_input_tokens_seen"] / metrics["train_runtime"],
    }


def table(results: dict) -> list[str]:
    median = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in results.items()}
    lines = [
        "| contender | peak resident memory (MiB, median) | training tokens/s (median) | rounds |",
        "|---|---|---|---|",
    ]
    for name, runs in results.items():
        lines.append(f"| {name} | {median[name]['peak_mib']:.0f} | {median[name]['tokens_per_s']:.0f} | {len(runs)} |")
    memory = median["stream_10x"]["peak_mib"] / median["stream_1x"]["peak_mib"]
    speed = median["stream_1x"]["tokens_per_s"] / median["memory_1x"]["tokens_per_s"]
    in_memory = median["memory_10x"]["peak_mib"] / median["memory_1x"]["peak_mib"]
    lines += [
        "",
        "| ratio | value | target |",
        "|---|---|---|",
        f"| peak memory, streamed 10x / streamed 1x | {memory:.3f} | ≤ 1.1 {'✓' if memory <= 1.1 else '✗'} |",
        f"| tokens/s, streamed / in memory (1x) | {speed:.3f} | ≥ 0.95 {'✓' if speed >= 0.95 else '✗'} |",
        f"| peak memory, in memory 10x / in memory 1x (for contrast) | {in_memory:.3f} | — |",
    ]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 documents, 20 steps, 1 round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of all contenders (default 3; quick 1)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 200; quick 20)")
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT))
    args = parser.parse_args(argv)

    from plldr_hf.training.corpus import load_text_corpus
    from plldr_hf.training.tokenizers import train_sentencepiece_tokenizer

    rounds = args.rounds or (1 if args.quick else 3)
    steps = args.steps or (20 if args.quick else 200)
    documents = load_text_corpus()["train"]["text"]
    documents = documents[:2000] if args.quick else documents
    results = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory(prefix="plldr-streaming-") as tmp:
        work = Path(tmp)
        tokenizer = work / "tokenizer"
        train_sentencepiece_tokenizer(documents, 512, model_max_length=64).save_pretrained(tokenizer)
        data = {
            "1x": write_corpus(work / "corpus-1x", documents, 1, 4),
            "10x": write_corpus(work / "corpus-10x", documents, 10, 4),
        }
        for round_index in range(rounds):
            order = CONTENDERS[round_index % 4 :] + CONTENDERS[: round_index % 4]
            for name in order:
                results[name].append(run_once(name, data[name.split("_")[1]], str(tokenizer), steps, work))
                print(f"round {round_index + 1}/{rounds} {name}: {results[name][-1]}", flush=True)
    lines = [
        "# Streamed against in-memory pretraining",
        "",
        f"- command: `python benchmarks/streaming.py {' '.join(argv if argv is not None else sys.argv[1:])}`".rstrip(),
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}; machine: {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs; load before: {os.getloadavg()[0]:.1f}",
        f"- corpus: {len(documents):,} documents of the embedded Shakespeare text (1x), and ten numbered copies (10x), "
        f"4 Parquet shards per copy; tiny PLDR-LLM, {steps} steps, 2 threads, one tokenizer for all runs",
        "",
        *table(results),
    ]
    text = "\n".join(lines) + "\n"
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
