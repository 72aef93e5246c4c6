"""The interleaved timing protocol of every speed number the project prints: the quickstart's and the benchmarks'.

A shared machine speeds up and slows down while it runs; timing contenders one after the other lets that drift
favour one of them. Here every contender runs once to warm up, then the contenders take turns within each round,
in serpentine order (forward in even rounds, backward in odd ones), so each has the same mean place in a round.
Ratios of medians (and of minima, and paired within-round ratios) then compare like with like.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


__all__ = [
    "decode_speeds",
    "interleaved",
    "interleaved_median_seconds",
    "scoring_speeds",
    "serpentine",
    "wall_seconds",
]


def serpentine(items: list, round_index: int) -> list:
    """The order of one timed round: forward in even rounds, backward in odd ones, so every contender's mean place
    in a round is the same and a machine that slows or speeds up within a round favours none of them."""
    return items if round_index % 2 == 0 else items[::-1]


def wall_seconds(run: Callable[[], object]) -> float:
    """Wall-clock seconds of one call of `run`."""
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def interleaved(runs: dict, rounds: int, measure: Callable = wall_seconds, on_result: Callable | None = None):
    """Measure each `runs[key]()` once to warm up, then `rounds` times, contenders alternating in serpentine order.

    `measure(run)` takes one measurement (default: wall seconds); `on_result(key, round, result)` sees each one
    (round None for the warm-up). Returns `(warm-up result per key, list of results per key)`.
    """
    first = {}
    for key, run in runs.items():
        first[key] = measure(run)
        if on_result is not None:
            on_result(key, None, first[key])
    results = {key: [] for key in runs}
    for index in range(rounds):
        for key in serpentine(list(runs), index):
            result = measure(runs[key])
            results[key].append(result)
            if on_result is not None:
                on_result(key, index, result)
    return first, results


def interleaved_median_seconds(runs: dict, rounds: int) -> dict[str, float]:
    """Median wall seconds per contender of `interleaved(runs, rounds)`."""
    _, results = interleaved(runs, rounds)
    return {key: statistics.median(values) for key, values in results.items()}


def _timed_no_grad(models: dict, work: Callable, rounds: int) -> dict[str, float]:
    """Median wall seconds of `work(model)` per model, without gradients, interleaved (so background load hits all
    alike)."""
    import torch

    def runner(model):
        def run():
            with torch.no_grad():
                work(model)

        return run

    return interleaved_median_seconds({name: runner(model) for name, model in models.items()}, rounds)


def decode_speeds(models: dict, prompt, new_tokens: int, rounds: int = 5) -> dict[str, float]:
    """Greedy tokens per second of each model, exactly `new_tokens` per run (interleaved medians)."""

    def work(model):
        model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)

    seconds = _timed_no_grad(models, work, rounds)
    return {name: new_tokens * prompt.shape[0] / value for name, value in seconds.items()}


def scoring_speeds(models: dict, input_ids, rounds: int = 7) -> dict[str, float]:
    """Tokens per second of one full forward pass over `input_ids` (scoring / prefill, as lm-eval's log-likelihoods
    run), per model (interleaved medians)."""
    seconds = _timed_no_grad(models, lambda model: model(input_ids, use_cache=False), rounds)
    return {name: input_ids.numel() / value for name, value in seconds.items()}
