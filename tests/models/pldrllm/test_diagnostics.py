"""`plldr_hf.models.pldrllm.diagnostics`: each check against constructed matrices with a known answer, then on tiny models whose
G is input-invariant by construction (collapsed) or not (random weights)."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

from plldr_hf.models.pldrllm import diagnostics as dg
from plldr_hf.models.pldrllm import modeling_pldrllm as mp
from plldr_hf.models.pldrllm.collapse import DEDUCTIVE_TENSORS
from plldr_hf.models.pldrllm.dag import dag_loss
from plldr_hf.models.pldrllm.plots import save_diagnostics
from tests.utils import make_invariant, tiny_model


D = 16


def rank_one_identical_rows(*batch):
    # A = 1·αᵀ: the form of a collapsed metric learner's output (github.com/burcgokden/PLDR-LLM-Math-Foundations)
    alpha = torch.randn(*batch, 1, D)
    return alpha.expand(*batch, D, D).clone()


def test_rank_one_audit_constructed_and_random():
    identical = dg.rank_one_audit(rank_one_identical_rows(3, 2))
    assert identical["sigma_ratio"].max() < 1e-12
    assert (identical["numerical_rank"] == 1).all() and identical["rows_identical"].all()
    # rank one but with different rows (u·vᵀ): σ₂/σ₁ ≈ 0, yet the rows are not identical
    outer = torch.randn(D, 1) @ torch.randn(1, D)
    audit = dg.rank_one_audit(outer)
    assert audit["sigma_ratio"] < 1e-6 and not audit["rows_identical"]
    random = dg.rank_one_audit(torch.randn(3, 2, D, D))
    assert random["sigma_ratio"].min() > 0.1
    assert (random["numerical_rank"] == D).all() and not random["rows_identical"].any()


def test_singular_value_spectrum_is_normalised_and_descending():
    spectrum = dg.singular_value_spectrum(torch.randn(4, D, D))
    assert torch.allclose(spectrum[:, 0], torch.ones(4, dtype=spectrum.dtype))
    assert (spectrum[:, 1:] <= spectrum[:, :-1]).all()
    assert (dg.singular_value_spectrum(torch.zeros(D, D)) == 0).all()


def test_cross_head_spread():
    same = torch.randn(1, D, D).expand(4, D, D)
    absolute, relative = dg.cross_head_spread(same)
    assert absolute == 0 and relative == 0
    heads = torch.randn(2, 4, D, D)
    absolute, relative = dg.cross_head_spread(heads)
    expected = max((heads[0, i] - heads[0, j]).pow(2).mean().sqrt() for i in range(4) for j in range(4))
    assert absolute.shape == (2,) and math.isclose(absolute[0].item(), expected.item(), rel_tol=1e-6)
    assert relative.min() > 1.0


def rope_matrix(position: int, reference_rope: bool) -> torch.Tensor:
    """R(p) with x_rot = x·R(p), built by rotating the rows of the identity with the model's own RoPE."""
    cos, sin = mp.rope_cos_sin(torch.tensor([[position] * D]), SimpleNamespace(head_dim=D, rope_theta=10000.0))
    apply = mp.apply_rope_interleaved if reference_rope else mp.apply_rope_half
    return apply(torch.eye(D, dtype=torch.float64)[None, None], cos.double(), sin.double())[0, 0]


@pytest.mark.parametrize("reference_rope", [True, False], ids=["interleaved", "neox"])
def test_rope_commutant_projection_and_residual(reference_rope):
    g = torch.randn(D, D, dtype=torch.float64)
    projected = dg.rope_commutant_projection(g, reference_rope)
    # the projection commutes with every rotation, is idempotent, and its residual is orthogonal to it
    for position in (1, 5, 37):
        r = rope_matrix(position, reference_rope)
        assert torch.allclose(r @ projected, projected @ r, atol=1e-12)
    assert torch.allclose(dg.rope_commutant_projection(projected, reference_rope), projected)
    assert abs(((g - projected) * projected).sum()) < 1e-10
    assert dg.rope_commutant_residual(projected, reference_rope) < 1e-12
    # a random G keeps only d of its d² degrees of freedom: residual ≈ sqrt(1 − 1/d)
    residual = dg.rope_commutant_residual(torch.randn(64, D, D), reference_rope)
    assert residual.shape == (64,) and abs(residual.mean() - math.sqrt(1 - 1 / D)) < 0.05
    # the pairs differ between the conventions
    assert dg.rope_commutant_residual(projected, not reference_rope) > 0.1


def test_perron_frobenius():
    positive = torch.rand(3, D, D) + 1e-3
    check = dg.perron_frobenius(positive)
    assert check["holds"].all() and check["entrywise_positive"].all()
    lam = torch.linalg.eigvals(positive.double()).abs().amax(-1)
    assert torch.allclose(check["perron_root"], lam)
    assert (check["spectral_gap"] < 1).all()
    # a rotation by 90°: entries of both signs, dominant eigenvalues ±i are not real
    rotation = torch.zeros(D, D)
    rotation[torch.arange(0, D, 2), torch.arange(1, D, 2)] = -1.0
    rotation[torch.arange(1, D, 2), torch.arange(0, D, 2)] = 1.0
    check = dg.perron_frobenius(rotation)
    assert not check["holds"] and not check["entrywise_positive"] and not check["dominant_real_positive"]
    # dominant eigenvalue real and negative
    assert not dg.perron_frobenius(-positive[0])["dominant_real_positive"]


def test_dag_values_per_layer():
    samples = torch.zeros(2, 3, 2, D, D)
    samples[:, 1] = torch.randn(2, 2, D, D)
    values = dg.dag_values_per_layer(samples)
    # tr e^0 = d, so the log-ratio form is 0 for a zero matrix
    assert values[0] == 0 and values[2] == 0
    assert math.isclose(values[1], dag_loss(samples[:, 1]).item(), rel_tol=1e-6)


def test_diagnose_collapsed_by_construction(tmp_path):
    model = make_invariant(tiny_model("sdpa"))
    report = dg.diagnose(model, new_tokens=4)
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    assert report.g_mode == "learned" and report.num_inputs >= 2
    for name in DEDUCTIVE_TENSORS:
        assert report.order_parameter[name] == 0 and report.order_parameter_rms[name] == 0
        assert report.order_parameter_inputs[name] == 0
    assert max(max(row) for row in report.sigma_ratio) < 1e-12
    assert report.numerical_rank == [[1] * heads] * layers
    assert report.rows_identical == [[True] * heads] * layers
    assert report.cross_head_rms == [0.0] * layers
    assert all(all(row) for row in report.perron_frobenius["holds"])
    assert len(report.dag["G_LM"]) == layers and all(v >= 0 for v in report.dag["A_LM"])
    assert "| 0 |" in report.format_table()

    paths = save_diagnostics(report, tmp_path)
    assert json.loads(paths["json"].read_text())["rows_identical"] == report.rows_identical
    for key in ("order_parameter", "singular_values"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # after collapse() and in the released fixed-G format the frozen G gives the same audit
    model.collapse()
    collapsed = dg.diagnose(model, new_tokens=4)
    assert collapsed.g_mode == "collapsed" and collapsed.sigma_ratio == report.sigma_ratio
    fixed = dg.diagnose(model.to_fixed_g(), new_tokens=4)
    assert fixed.g_mode.startswith("fixed") and fixed.order_parameter["G_LM"] == 0
    assert fixed.order_parameter["A_P"] is None and fixed.dag["A_P"] == [None] * layers
    assert json.dumps(fixed.to_dict())


def test_diagnose_random_model():
    model = tiny_model("sdpa")
    ids = torch.randint(4, 99, (3, 9), generator=torch.Generator().manual_seed(0))
    report = dg.diagnose(model, ids, new_tokens=4)
    assert report.num_inputs == 3 and report.input_lengths == [9, 9, 9]
    assert report.order_parameter["G_LM"] > 1e-3 and report.order_parameter_inputs["G_LM"] > 1e-3
    assert 0 < report.order_parameter_rms["G_LM"] <= 2
    assert min(min(row) for row in report.sigma_ratio) > 0.1
    assert not any(any(row) for row in report.rows_identical)
    assert min(report.cross_head_rms) > 0
    assert min(min(row) for row in report.commutant_residual) > 0.5


def test_diagnose_rejects_bad_input():
    model = tiny_model()
    with pytest.raises(ValueError, match="tokenizer"):
        dg.diagnose(model, ["some text"])
    with pytest.raises(ValueError, match="new_tokens"):
        dg.diagnose(model, new_tokens=0)
    with pytest.raises(ValueError, match=r"integer tensor of shape \(N, S\)"):
        dg.diagnose(model, torch.tensor([5, 6, 7]))


def test_plots_are_readable_at_a_glance(tmp_path):
    """≥ 1000 px wide, one question per figure; legends sit outside the axes (checked by eye once)."""
    from PIL import Image

    from plldr_hf.models.pldrllm.diagnostics import diagnose
    from plldr_hf.plots import plot_loss_curves
    from tests.utils import tiny_model

    paths = save_diagnostics(diagnose(tiny_model()), tmp_path)
    history = [
        {"step": 1, "loss": 3.0, "lm_loss": 2.9, "dag_a_lm": 0.1},
        {"step": 2, "loss": 2.8, "lm_loss": 2.7, "dag_a_lm": 0.2},
        {"step": 2, "eval_lm_loss": 2.5},
    ]
    pngs = [paths["order_parameter"], paths["singular_values"], plot_loss_curves(history, tmp_path / "loss.png")]
    for png in pngs:
        width, height = Image.open(png).size
        assert width >= 1000 and height >= 400, (png, width, height)


def test_loss_curves_with_too_few_points_are_skipped_with_a_reason(tmp_path):
    from plldr_hf.plots import loss_curves_skipped, plot_loss_curves

    history = [{"step": 3, "loss": 3.0}, {"step": 3, "eval_loss": 2.9}]
    assert plot_loss_curves(history, tmp_path / "loss.png") is None and not (tmp_path / "loss.png").exists()
    assert loss_curves_skipped(history) == "no loss curve has two points yet (1 logged value(s) after 3 step(s))"
    assert loss_curves_skipped([]) is not None


def test_every_headline_order_parameter_is_the_max_of_its_per_layer_values_and_the_tables_are_well_formed():
    from plldr_hf.models.pldrllm.diagnostics import diagnose
    from tests.utils import markdown_tables, tiny_model

    model = tiny_model(num_hidden_layers=3)
    report = diagnose(model)
    for name in ("A", "A_LM", "A_P", "G_LM"):
        assert report.order_parameter[name] == max(report.order_parameter_per_layer[name])
        assert report.order_parameter_inputs[name] == max(report.order_parameter_inputs_per_layer[name])
        assert report.order_parameter_rms[name] == max(report.order_parameter_rms_per_layer[name])
    headline, per_layer, stages = markdown_tables(report.format_table())
    assert len(stages) == 1 + 3 and stages[0][0] == "layer"  # the stage table: one row per layer
    assert len(per_layer) == 1 + 3
    g_row = next(row for row in headline[1:] if row[0] == "G_LM")
    column = per_layer[0].index("G_LM SOC across inputs")
    assert g_row[1] == max((row[column] for row in per_layer[1:]), key=float)
    saved = report.to_dict()
    assert "max over layers" in saved["aggregation"]["order_parameter_inputs"]

    collapse = model.collapse(force=True)
    assert collapse.order_parameter["G_LM"] == max(collapse.per_layer["G_LM"])
    assert collapse.order_parameter["G_LM"] == pytest.approx(report.order_parameter_inputs["G_LM"], rel=1e-4)
    (table,) = markdown_tables(str(collapse))
    assert table[0][1] == "order parameter (SOC across inputs, max over layers)"
    assert "max over layers" in collapse.to_dict()["aggregation"]["order_parameter"]
