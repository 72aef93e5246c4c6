"""Smoke test of the benchmark suite: `python -m benchmarks run --quick` end to end, tiny sizes.

Numbers are reported, not asserted: this checks only that every workload runs, that every contender and ratio of
the issue is measured, and that the Markdown and JSON reports are written.
"""

import json
import math

import pytest

from benchmarks import __main__ as cli
from benchmarks import suite


def test_quick_suite_runs_every_workload_and_writes_both_reports(tmp_path, capsys):
    output = tmp_path / "results"
    assert cli.main(["run", "--quick", "--output", str(output)]) == 0

    report = json.loads(output.with_suffix(".json").read_text())
    assert report["meta"]["quick"] is True
    assert [w["key"] for w in report["workloads"]] == list(suite.WORKLOADS)
    targets = 0
    for workload in report["workloads"]:
        for key, result in workload["contenders"].items():
            assert result["median_s"] > 0 and len(result["runs_s"]) == workload["protocol"]["repeats"], key
        for ratio in workload["ratios"]:
            assert math.isfinite(ratio["value"]) and ratio["value"] > 0, ratio
            if ratio["kind"] != "memory":
                assert math.isfinite(ratio["value_paired"]) and ratio["value_paired"] > 0, ratio
                assert math.isfinite(ratio["value_min"]) and ratio["value_min"] > 0, ratio
            targets += ratio["target"] is not None
    # the targets: 2 + 2 decode, 3 scoring, 3 training (time default / activations stored, memory), 1 small training, 1 AGF
    assert targets == 12
    train = next(w for w in report["workloads"] if w["key"] == "train")
    models = {key: result for key, result in train["contenders"].items() if key != "gemm_floor"}
    assert len(models) == 5 and all(result["fresh_peak_bytes"] > 0 for result in models.values())
    # the GEMM floor is a replay, not a model: no fresh-process memory run, a time ratio in each workload with a bound
    for key in ("scoring", "train", "train_small"):
        workload = next(w for w in report["workloads"] if w["key"] == key)
        assert "fresh_peak_bytes" not in workload["contenders"]["gemm_floor"]
        floor = next(r for r in workload["ratios"] if r["numerator"] == "gemm_floor")
        assert floor["kind"] == "time" and floor["bound"] > 1.0 and floor["value"] > 0
    bounds = [r["bound"] for w in report["workloads"] for r in w["ratios"] if r["bound"] is not None]
    assert len(bounds) >= 6 and all(1.0 < b < 3.0 for b in bounds)

    markdown = output.with_suffix(".md").read_text()
    for label in (
        "## Summary",
        "StaticCache + torch.compile",
        "KV + G cache",
        "DAG term on",
        "PCM-V",
        "Marian",
        "FLOP bound",
    ):
        assert label in markdown
    assert "## Summary" in capsys.readouterr().out


def test_list_names_the_workloads(capsys):
    assert cli.main(["list"]) == 0
    assert capsys.readouterr().out.split() == list(suite.WORKLOADS)


def test_metric_learner_benchmark_times_every_contender(tmp_path, capsys):
    from benchmarks import metric_learner

    output = tmp_path / "metric_learner"
    assert metric_learner.main(["--rounds", "1", "--output", str(output)]) == 0
    rows = json.loads(output.with_suffix(".json").read_text())["rows"]
    assert {r["key"] for r in rows} == {f"{path}_{kind}" for path in ("modules", "fused")
                                        for kind in ("recompute", "stored", "forward")}  # fmt: skip
    for row in rows:
        assert 0 < row["min_ms"] <= row["median_ms"], row
        assert (row["paired_ratio"] is None) == row["key"].startswith("modules"), row
    assert "paired ratio" in capsys.readouterr().out


def test_rounds_alternate_direction_so_no_contender_always_runs_first():
    calls = []
    contenders = [suite.Contender(key, key, lambda key=key: calls.append(key)) for key in "abc"]
    workload = suite.Workload("w", "w", {}, contenders, [suite.Ratio("a / c", "a", "c", "time")])
    suite.measure(workload, repeats=3, log=lambda message: None)
    assert calls == list("abc") + list("abc") + list("cba") + list("abc")  # warm-ups, then serpentine rounds
    assert all(len(workload.measured[key]["runs_s"]) == 3 for key in "abc")


def _measured(times: dict) -> dict:
    return {
        key: {"median_s": sorted(runs)[len(runs) // 2], "min_s": min(runs), "cpu_s": 1.0, "runs_s": runs}
        for key, runs in times.items()
    }


def test_paired_ratio_reports_its_spread_and_flags_a_target_inside_it():
    # within-round ratios 1.10, 1.15, 1.20, 1.25, 1.30: median 1.20, interquartile range 1.15–1.25
    measured = _measured({"ours": [1.10, 1.15, 1.20, 1.25, 1.30], "base": [1.0] * 5})
    inside = suite.Ratio("ours / base", "ours", "base", "time", 1.2, "<=")
    inside.evaluate(measured)
    assert inside.value_paired == pytest.approx(1.2) and inside.value_min == pytest.approx(1.1)
    assert inside.paired_iqr == pytest.approx((1.15, 1.25))
    assert inside.met and inside.within_noise
    assert suite.verdict(inside) == "✓ (<= 1.2), within noise"
    outside = suite.Ratio("ours / base", "ours", "base", "time", 1.4, "<=")
    outside.evaluate(measured)
    assert outside.met and outside.within_noise is False and suite.verdict(outside) == "✓ (<= 1.4)"
    missed = suite.Ratio("ours / base", "ours", "base", "time", 1.1, "<=")
    missed.evaluate(measured)
    assert not missed.met and not missed.within_noise and suite.verdict(missed) == "✗ (<= 1.1)"


def test_position_ablation_quick_reports_the_source_gap_of_each_variant(tmp_path):
    """The AGF paper's comparison at smoke scale, with the hybrid: the table has a source-gap column with a value per
    variant, and the plot is written."""
    import subprocess
    import sys

    from tests.utils import REPO_ROOT, markdown_tables

    argv = [sys.executable, str(REPO_ROOT / "benchmarks" / "position_ablation.py"), "--quick", "--variants"]
    argv += ["sinusoidal", "agf+pcmv+abs", "--output-dir", str(tmp_path / "out"), "--report-dir", str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = markdown_tables((tmp_path / "position_ablation.md").read_text())[0]
    column = table[0].index("in-domain source gap (acc. points)")
    rows = {row[0]: row[column] for row in table[1:]}
    for label in ("sinusoidal (vanilla)", "AGF + PCM-V + absolute"):
        assert rows[label] not in ("", "n/a"), rows
        float(rows[label].split()[0])
    assert (tmp_path / "position_ablation.png").stat().st_size > 10_000

    # a long run of sinusoidal: its curve, and its scores at the budget's steps are those of the plain run above
    argv[argv.index("--variants") + 1 : argv.index("--output-dir")] = ["sinusoidal"]
    argv[argv.index("--output-dir") + 1] = str(tmp_path / "long")
    argv += ["--long", "16", "--curve-every", "4"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    curve = markdown_tables((tmp_path / "position_ablation_long.md").read_text())[0]
    assert [row[0] for row in curve[1:]] == ["4", "8", "12", "16"]
    assert (tmp_path / "position_ablation_long.png").stat().st_size > 10_000

    def runs(folder):
        lines = (tmp_path / folder / "quick" / "runs.jsonl").read_text().splitlines()
        return {(r["variant"], r["seed"]): r for r in map(json.loads, lines)}

    plain, long = runs("out")[("sinusoidal", 0)], runs("long")[("sinusoidal", 0)]
    for split in ("test", "gnome"):
        assert long[split]["loss"] == plain[split]["loss"] and long[split]["accuracy"] == plain[split]["accuracy"]
    assert long["final_loss"] == plain["final_loss"]
    assert runs("long")[("sinusoidal", 1)]["test"]["loss"] == runs("out")[("sinusoidal", 1)]["test"]["loss"]


def test_streaming_benchmark_quick_mode_measures_both_paths(tmp_path):
    # numbers are reported, not asserted (they belong to the machine): the quick run works end to end
    from benchmarks import streaming

    output = tmp_path / "streaming.md"
    assert streaming.main(["--quick", "--output", str(output)]) == 0
    text = output.read_text()
    for contender in streaming.CONTENDERS:
        assert f"| {contender} |" in text
    assert "peak memory, streamed 10x / streamed 1x" in text and "tokens/s, streamed / in memory (1x)" in text


@pytest.mark.parametrize(
    "flags", [["--repeats", "0"], ["--threads", "0"], ["--threads", "-2"], ["--profile-rows", "0"]]
)
def test_suite_counts_below_one_are_one_line_errors(flags, capsys):
    from benchmarks import suite

    with pytest.raises(SystemExit) as exit_info:
        suite.main(["--quick", *flags])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"{flags[0]} must be at least 1, got {flags[1]}" in err and "Traceback" not in err
