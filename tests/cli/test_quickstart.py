"""The main job end to end at smoke-test scale: `plldr-hf quickstart --tiny` (tiny models, fixed steps)."""

import json
import math
from pathlib import Path

import pytest

from plldr_hf.cli import main
from plldr_hf_cli.quickstart import QuickstartPlan, run_quickstart
from tests.utils import markdown_tables


def test_quickstart_tiny_writes_everything(tmp_path, capsys):
    out = tmp_path / "quickstart"
    # the AGF + PCM-V translator, so that its coefficient plot and summary lines are exercised too
    assert main(["quickstart", "--output-dir", str(out), "--tiny", "--translator", "agf+pcmv"]) == 0
    stdout = capsys.readouterr().out
    # no stray blank lines: blank lines only inside the printed Markdown summary, never two in a row
    assert "\n\n\n" not in stdout and not stdout.startswith("\n")
    before_summary = stdout.split("# plldr_hf quickstart")[0]
    assert "\n\n" not in before_summary, before_summary

    metrics = json.loads((out / "metrics.json").read_text())
    pldr, agf = metrics["pldrllm"], metrics["agf"]
    # each stage holds its training run's report as `train` saved it
    for stage in (pldr, agf):
        assert stage["run"] == json.loads((Path(stage["run"]["output_dir"]) / "train_report.json").read_text())
    assert pldr["run"]["global_step"] == pldr["run"]["max_steps"] == 40
    perplexity = pldr["run"]["scores"]["validation"]["perplexity"]
    assert math.isfinite(perplexity) and 1 < perplexity < 512
    assert set(pldr["collapse"]["order_parameter"]) == {"A", "A_LM", "A_P", "G_LM"}
    # a 40-step model is not input-invariant: collapse() must refuse it and say why
    assert pldr["collapse_refused"] and "order parameter" in pldr["collapse_refused"]
    assert pldr["collapse"]["forced"] is True and pldr["collapse"]["invariant"] is False
    # one order parameter: the training report, diagnose and collapse() measure the same number; the
    # report's value comes from the in-memory model at the end of training, the others from the saved one, and a
    # 40-step random-like model amplifies float32 kernel rounding (measured 1.3e-5 relative): equal at 3 digits
    after = pldr["run"]["diagnostics"]["order_parameter_after"]["across_inputs_max_over_layers"]["G_LM"]
    assert pldr["collapse"]["order_parameter"]["G_LM"] == pytest.approx(after, rel=1e-4)
    assert pldr["order_parameter_prompts"]["G_LM"] == pytest.approx(after, rel=1e-4)
    assert pldr["decode_speed"]["collapsed_tok_s"] > 0 and pldr["decode_speed"]["uncollapsed_kv_g_cache_tok_s"] > 0
    # where collapse pays: scoring forwards, collapsed / uncollapsed throughput from interleaved medians
    scoring = pldr["scoring_speed"]
    assert pldr["collapse_speedup"] == pytest.approx(scoring["collapsed_tok_s"] / scoring["uncollapsed_tok_s"])
    assert (scoring["batch_size"], scoring["sequence_length"], scoring["rounds"]) == (16, 64, 7)
    assert len(pldr["samples"]) == 3
    test = agf["run"]["scores"]["test"]
    assert agf["run"]["global_step"] == agf["run"]["max_steps"] == 60
    for key in ("bleu", "chrf", "accuracy", "wrong_source_accuracy"):
        assert math.isfinite(test[key]) and test[key] >= 0
    assert test["source_gap"] == pytest.approx(test["accuracy"] - test["wrong_source_accuracy"])
    assert test["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert len(agf["examples"]) == agf["example_rule"]["count"] == 4
    # the examples are the scored translations of the first test segments of 4-12 source words
    for example in agf["examples"]:
        assert 4 <= len(example["source"].split()) <= 12 and example["reference"]
    # validation curve (teacher-forced) and how far the AGF curves moved
    assert [v["step"] for v in agf["validation"]] == list(range(6, 61, 6))
    assert all(math.isfinite(v["loss"]) for v in agf["validation"])
    assert agf["coefficient_change"]["max_abs_log_change"] > 0
    assert "AGF coefficient curves: the largest change" in (out / "summary.md").read_text()

    assert metrics["reload"]["pldrllm"] == {
        "model_class": "PldrllmForCausalLM",
        "checks": {"identical": True, "collapsed": False},
    }
    assert metrics["reload"]["pldrllm-collapsed"]["checks"]["collapsed"] is True
    assert metrics["reload"]["agf"]["checks"]["generates"] is True
    for plots in (pldr["plots"], agf["plots"]):
        for path in plots.values():
            with open(path, "rb") as png:
                assert png.read(8) == b"\x89PNG\r\n\x1a\n"
    summary = (out / "summary.md").read_text()
    assert f"{perplexity:.2f}" in summary and f"{test['bleu']:.2f}" in summary
    # the summary's counts are the run's: rounds, segments, the examples' rule
    assert f"median of {scoring['rounds']} interleaved rounds" in summary
    assert f"Test split ({metrics['plan']['agf_test_samples']} segments, beam {test['num_beams']})" in summary
    assert "The first 4 test segments of 4–12 source words" in summary
    # a complete run says so, and its tables are well-formed Markdown
    assert metrics["complete"] is True and metrics["warnings"] == [] and "WARNING" not in summary
    assert "Every stage ran its planned steps" in summary
    order_table, examples = markdown_tables(summary)
    g_row = next(row for row in order_table[1:] if row[0] == "G_LM")
    # the headline is the largest of the per-layer values printed beside it
    assert float(g_row[1]) == max(float(v) for v in g_row[2].split(", "))
    assert len(examples) == 1 + len(agf["examples"])
    for folder in ("pldrllm", "pldrllm-collapsed", "agf"):
        assert (out / folder / "model.safetensors").is_file() and (out / folder / "tokenizer.json").is_file()


def test_plans_check_their_fields():
    with pytest.raises(ValueError, match="--minutes"):
        QuickstartPlan.named(minutes=0)
    with pytest.raises(ValueError, match="unknown quickstart plan"):
        QuickstartPlan.named("huge")
    assert QuickstartPlan.named().minutes is None and QuickstartPlan.named().threads == 2


def test_one_clock_passes_unused_time_on():
    from plldr_hf_cli.quickstart import Deadline

    plan = QuickstartPlan.named(minutes=10)
    deadline = Deadline(600)
    deadline.start -= 120  # the first stage finished after two of its three minutes
    (budget,) = deadline.callbacks(plan, deadline.left() - plan.agf_reserve_s)
    # the next stage gets everything left but the reserve for its scoring, not a fixed share
    assert budget.seconds == pytest.approx(600 - 120 - plan.agf_reserve_s, abs=1)
    assert deadline.callbacks(QuickstartPlan.named(), 100) == []  # no budget: fixed steps, no clock


def test_a_run_cut_short_by_the_budget_warns_in_the_headline_and_next_to_every_score(tmp_path, capsys):
    out = tmp_path / "short"
    # a budget far too small for the plan: both stages stop after their first steps (2 s each)
    plan = QuickstartPlan.named(
        "tiny", minutes=0.01, pldr_steps=100000, agf_steps=100000, agf_test_samples=20, min_stage_s=2.0
    )
    result = run_quickstart(out, plan)
    assert result.pldrllm.run.global_step < 100000 and result.agf.run.global_step < 100000
    assert result.pldrllm.stopped_by_time_budget and result.agf.stopped_by_time_budget
    assert result.complete is False and len(result.warnings) == 2
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["warnings"] == result.warnings and "not comparable" in metrics["warnings"][1]
    summary = (out / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("**WARNING: the time budget (--minutes 0.01) stopped the PLDR-LLM")
    bleu_line = next(line for line in summary.splitlines() if "BLEU **" in line)
    assert "WARNING" in bleu_line and "not comparable" in bleu_line
    assert "plldr-hf quickstart: WARNING" in capsys.readouterr().err
    markdown_tables(summary)


def test_translator_choices_match_the_plan():
    from plldr_hf.cli import build_parser
    from plldr_hf.models.agf.position_encodings import POSITION_VARIANTS

    parser = build_parser()
    action = next(
        a for a in parser._subparsers._group_actions[0].choices["quickstart"]._actions if a.dest == "translator"
    )
    assert tuple(action.choices) == tuple(POSITION_VARIANTS)
    with pytest.raises(ValueError, match="unknown translator 'nope'"):
        run_quickstart("unused", QuickstartPlan.named("tiny"), translator="nope")
