"""`tools/gpu_check.py`, the prepared GPU check, on the CPU: its dry run (plan, wheel list, output format) and its
measurement stages at tiny sizes (`--cpu-smoke`), so the code that runs on a GPU machine has run before it gets
there."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_check  # noqa: E402


def _run(*args):
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu_check.py"), *args], capture_output=True, text=True, cwd=ROOT
    )


def test_dry_run_checks_plan_wheels_and_writes_the_report(tmp_path):
    proc = _run("--out", str(tmp_path), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["dry_run"] is True
    # the plan fits the 8 minutes with its estimates, and every stage appears in the table with its status
    assert sum(stage["estimate_s"] for stage in report["plan"]) <= report["budget_s"] <= 480
    table = (tmp_path / "gpu_check.md").read_text()
    for stage in gpu_check.PLAN:
        assert f"`{stage.key}`" in table
    assert set(report["skipped"]) == {s.key for s in gpu_check.PLAN if s.key != "environment"}
    assert "transformers==5.24.0" in report["wheels"] or any(w.startswith("transformers==") for w in report["wheels"])
    assert "[" in proc.stdout and "plan:" in proc.stdout


def test_wheel_list_is_pinned_and_satisfies_the_package():
    pins = gpu_check.read_wheels()
    assert pins and all(version for _, version in pins)
    assert gpu_check.check_wheels(pins) == []
    # a pin the package cannot use, and a package listed twice, are caught
    assert gpu_check.check_wheels([*pins, ("transformers", "4.56.1")])
    assert any("transformers" in p for p in gpu_check.check_wheels([(n, v) for n, v in pins if n != "transformers"]))


def test_a_bad_wheel_line_is_named(tmp_path):
    bad = tmp_path / "wheels.txt"
    bad.write_text("transformers>=5\n")
    with pytest.raises(ValueError, match="wheels.txt:1: expected NAME==VERSION"):
        gpu_check.read_wheels(bad)


def test_plan_over_budget_is_refused(tmp_path):
    proc = _run("--out", str(tmp_path), "--dry-run", "--budget-s", "60")
    assert proc.returncode == 2
    assert "exceeds the budget" in proc.stderr


def test_cpu_smoke_runs_every_measurement_stage(tmp_path):
    proc = _run("--out", str(tmp_path), "--cpu-smoke")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    results = report["results"]
    assert not [key for key, why in report["skipped"].items() if why.startswith("failed")], report["skipped"]
    assert results["fixtures"]["ok"], results["fixtures"]
    p = results["pldrllm_vs_llama"]
    assert set(p["train"]["ratio"]) == {"pldrllm_learned_g", "pldrllm_learned_g_dag"}
    assert p["train"]["flop_bound"] > 1
    assert set(p["decode"]) == {"batch_1", "batch_2"}
    assert results["metric_learner"]["max_abs_diff_vs_modules"]["fused"] < 1e-5
    assert len(results["agf_flex"]["rows"]) == 3
    assert "flex_attention" in results["agf_flex"]["skipped"]
    table = (tmp_path / "gpu_check.md").read_text()
    assert "## PLDR-LLM vs Llama (equal size)" in table and "| pldrllm_learned_g |" not in table.split("## Plan")[0]
