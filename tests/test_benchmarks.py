"""Smoke test of the benchmark suite (issue 9): `python -m benchmarks run --quick` end to end, tiny sizes.

Numbers are reported, not asserted: this checks only that every workload runs, that every contender and ratio of
the issue is measured, and that the Markdown and JSON reports are written.
"""

import json
import math

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
            targets += ratio["target"] is not None
    # the targets: 2 + 2 decode, 2 scoring, 2 training, 1 AGF attention
    assert targets == 9

    markdown = output.with_suffix(".md").read_text()
    for label in ("## Summary", "StaticCache + torch.compile", "KV + G cache", "DAG term on", "PCM-V", "Marian"):
        assert label in markdown
    assert "## Summary" in capsys.readouterr().out


def test_list_names_the_workloads(capsys):
    assert cli.main(["list"]) == 0
    assert capsys.readouterr().out.split() == list(suite.WORKLOADS)
