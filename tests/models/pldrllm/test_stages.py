"""Stage-by-stage statistics of PLGA (`plldr_hf.models.pldrllm.stages`): what each stage's tensor is, that the
G_LM order parameter is `diagnose()`'s with its numerator and denominator, and that a model made invariant at one
stage shows it at that stage."""

import math

import pytest
import torch

from plldr_hf.models.pldrllm.collapse import default_calibration
from plldr_hf.models.pldrllm.diagnostics import diagnose, order_parameters
from plldr_hf.models.pldrllm.plga import residual_units
from plldr_hf.models.pldrllm.stages import (
    CHAIN,
    capture_gram_ln,
    format_stages,
    stage_statistics,
    strongest_contraction,
)
from tests.utils import make_invariant, tiny_model


def test_the_captured_gram_is_what_the_metric_learner_reads():
    """A = residual units(LN(A0)): the LN(A0) the statistics use is the metric learner's own input."""
    torch.manual_seed(0)
    model = tiny_model()
    captured, handles = capture_gram_ln(model)
    try:
        with torch.no_grad():
            outputs = model(torch.tensor([[5, 9, 11, 7, 20, 3]]), output_pldr_attentions=True, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    for index, layer in enumerate(model.decoder.dec_layers):
        a = residual_units(captured[index], layer.mha1.reslayerAs)
        torch.testing.assert_close(a, outputs.pldr_attentions[index][0], rtol=1e-5, atol=1e-6)


def test_statistics_agree_with_diagnose_and_with_themselves():
    torch.manual_seed(0)
    model = tiny_model()
    sequences = default_calibration(model.config)
    stages = stage_statistics(model, sequences)
    report = diagnose(model)
    assert report.stages is not None and "Stages (relative spread" in report.format_table()
    assert stages["input_lengths"] == [len(s) for s in sequences]
    for index, layer in enumerate(stages["layers"]):
        g = layer["G_LM"]
        assert g["order_parameter"] == pytest.approx(report.order_parameter_inputs_per_layer["G_LM"][index], rel=1e-9)
        assert g["order_parameter"] == pytest.approx(g["numerator_rmse"] / g["denominator_abs_mean"], rel=1e-12)
        for name in CHAIN:
            assert 0 <= layer[name]["relative"] <= 1  # the spread around the mean never exceeds the RMS
        product = math.prod(layer["factors"].values())
        assert product == pytest.approx(layer["G_LM"]["relative"] / layer["gram_ln"]["relative"], rel=1e-9)
        assert len(layer["deviation_by_input"]["gram_ln"]) == len(sequences)
        assert math.isfinite(layer["P_mean"]) and layer["sensitivity"] > 0 and layer["rms_b"] >= 0
    headline = order_parameters(model)["stages_of_the_headline_layer"]
    worst = headline["layer"]
    assert headline["relative_G_LM"] == stages["layers"][worst]["G_LM"]["relative"]


def test_a_model_made_invariant_in_the_metric_learner_shows_it_there():
    """The last residual unit's LayerNorm with zero gain returns its bias: A no longer depends on the input though
    LN(A0) does; the contraction factor LN(A0)→A is 0, and so is every spread after it."""
    torch.manual_seed(0)
    model = make_invariant(tiny_model())
    stages = stage_statistics(model, default_calibration(model.config))
    for layer in stages["layers"]:
        assert layer["gram_ln"]["relative"] > 0.1
        assert layer["factors"]["gram_ln->A"] == pytest.approx(0, abs=1e-6)
        assert layer["G_LM"]["relative"] == pytest.approx(0, abs=1e-6)
        assert layer["G_LM"]["order_parameter"] == pytest.approx(0, abs=1e-5)
        assert strongest_contraction(layer) == "LN(A0)→A"
    # the table names the stage in every layer's row
    rows = [line for line in format_stages(stages).splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == model.config.num_hidden_layers and all(row.endswith("| LN(A0)→A |") for row in rows)


def test_a_model_made_invariant_in_the_power_step_shows_it_there():
    """P = 0 makes A_P = A_LM^0 = 1 whatever the input: the table names A_LM→A_P, not the metric learner."""
    torch.manual_seed(0)
    model = tiny_model()
    with torch.no_grad():
        for layer in model.decoder.dec_layers:
            layer.mha1.plgatt_layer.pwlst.zero_()
    stages = stage_statistics(model, default_calibration(model.config))
    for layer in stages["layers"]:
        assert layer["factors"]["gram_ln->A"] > 0.1
        assert layer["factors"]["A_LM->A_P"] == pytest.approx(0, abs=1e-6)
        assert strongest_contraction(layer) == "A_LM→A_P"
    assert all(row.endswith("| A_LM→A_P |") for row in format_stages(stages).splitlines()[4:])


def test_nothing_to_compare():
    model = tiny_model()
    assert stage_statistics(model, [[5, 6, 7]]) is None  # one input: no spread
    same = stage_statistics(model, [[5, 6, 7], [5, 6, 7]])
    assert all(layer["G_LM"]["spread"] == 0 and layer["G_LM"]["order_parameter"] == 0 for layer in same["layers"])
    model.collapse(force=True)
    assert stage_statistics(model, default_calibration(model.config)) is None  # a fixed G
