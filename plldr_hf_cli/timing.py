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


__all__ = ["interleaved", "interleaved_median_seconds", "serpentine", "wall_seconds"]


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
