"""The criticality sweep (`benchmarks/criticality.py`) on a 2 × 1 grid of tiny models for a few steps: the pipeline,
not the science (the grid itself runs for tens of minutes; its results are in `benchmarks/results/criticality.md`)."""

import json

import pytest

from benchmarks import criticality


def test_spearman_and_its_bootstrap_interval():
    assert criticality.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert criticality.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties share their mean rank
    assert criticality._ranks([5.0, 1.0, 5.0]) == [2.5, 1.0, 2.5]
    assert criticality.spearman([1, 1, 1], [1, 2, 3]) is None
    low, high = criticality.bootstrap_interval([1, 2, 3, 4, 5, 6], [2, 1, 4, 3, 6, 5], samples=200)
    assert -1 <= low <= high <= 1


def test_a_two_cell_sweep_writes_its_outputs_and_reuses_finished_cells(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["run", "--out", str(out), "--sizes", "tiny", "--learning-rates", "1e-3", "3e-3", "--warmups", "0",
            "--seeds", "0", "--steps", "4", "--eval-every", "2"]  # fmt: skip
    assert criticality.main(argv) == 0
    first = capsys.readouterr().out
    assert "2 cells, 0 already done" in first and "[2/2]" in first
    cells = sorted((out / "cells").glob("*.json"))
    assert len(cells) == 2
    record = json.loads(cells[0].read_text())
    # a trajectory point at every evaluation, with both order parameters, max over layers and per layer
    assert [p["step"] for p in record["trajectory"]] == [2, 4]
    point = record["trajectory"][0]
    assert set(point) >= {"step", "validation_loss", "G_LM", "A_LM"}
    assert len(point["G_LM"]["per_layer"]) == 2
    assert point["G_LM"]["max_over_layers"] == max(point["G_LM"]["per_layer"])
    assert set(record["rank_one"]) == {"sigma_ratio", "numerical_rank", "rows_identical"}
    assert record["collapse"]["accepted"] in (True, False)
    for name in ("criticality.md", "criticality.json", "criticality_phase.png", "criticality_trajectories.png"):
        assert (out / name).stat().st_size > 0
    table = (out / "criticality.md").read_text()
    assert "| tiny | 0.001 | 0 | 0 |" in table and "| tiny | 0.003 | 0 | 0 |" in table

    # a rerun trains nothing again
    mtimes = [p.stat().st_mtime_ns for p in cells]
    assert criticality.main(argv) == 0
    assert "2 cells, 2 already done" in capsys.readouterr().out
    assert [p.stat().st_mtime_ns for p in cells] == mtimes

    # a truncated cell is named and retrained, the other kept
    cells[0].write_text(cells[0].read_text()[:50])
    assert criticality.main(argv) == 0
    captured = capsys.readouterr()
    assert f"{cells[0]} cannot be read" in captured.err and "2 cells, 1 already done" in captured.out
    assert json.loads(cells[0].read_text())["key"] == record["key"]
    assert cells[1].stat().st_mtime_ns == mtimes[1]


def test_bad_grid_values_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "a_file").write_text("x")
    for argv in (
        ["--learning-rates", "nan"], ["--learning-rates", "-1"], ["--warmups", "-3"], ["--jobs", "0"],
        ["--out", str(tmp_path / "a_file")],
    ):  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            criticality.main(["run", "--out", str(tmp_path), *argv])
        assert exit_info.value.code == 2
        assert "error:" in capsys.readouterr().err
