"""A PLDR-LLM run reports where its G stays input-dependent: the stages' relative spreads at every evaluation (and
their plot), and the order parameters on held-out text beside the default calibration."""

import math

from plldr_hf.training import TrainOptions, train


def test_a_run_reports_the_stages_and_the_real_text_calibration(tmp_path):
    options = TrainOptions.from_name(
        "tiny", output_dir=str(tmp_path), max_steps=20, eval_steps=10, report_to=["none"], disable_tqdm=True
    )
    report = train(options)
    logged = [entry for entry in report.log_history if "stage_relative_G_LM" in entry]
    assert [entry["step"] for entry in logged] == [10, 20]
    for entry in logged:
        assert all(0 <= entry[f"stage_relative_{name}"] <= 1 for name in ("gram_ln", "A", "A_LM", "A_P", "G_LM"))
    assert report.stage_curves and (tmp_path / "stages_over_training.png").stat().st_size > 10_000
    after, real = report.diagnostics["order_parameter_after"], report.diagnostics["order_parameter_after_real_text"]
    stages = after["stages_of_the_headline_layer"]
    soc = stages["G_LM_soc_numerator_rmse"] / stages["G_LM_soc_denominator_abs_mean"]
    assert math.isclose(soc, after["across_inputs_max_over_layers"]["G_LM"], rel_tol=1e-9)
    # held-out blocks of the training text are other inputs than the default ones: another measurement
    assert math.isfinite(real["across_inputs_max_over_layers"]["G_LM"])
    assert real["across_inputs_max_over_layers"]["G_LM"] != after["across_inputs_max_over_layers"]["G_LM"]
    saved = report.load(tmp_path)
    assert saved.stage_curves == report.stage_curves
    assert saved.diagnostics["order_parameter_after_real_text"] == real
