"""`plldr-hf plot-agf`: the coefficient-curve PNG of a saved AGF model."""

import torch

from plldr_hf.cli import main
from plldr_hf.models.agf.plots import panel_title, plot_coefficient_curves
from tests.utils import tiny_agf


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_cli_writes_png_of_saved_model(tmp_path, capsys):
    tiny_agf(agf_amplitude_max_distance=4, pcmv=True, pcmv_coefficient="separate").save_pretrained(tmp_path / "model")
    assert main(["plot-agf", str(tmp_path / "model"), "--max-distance", "16"]) == 0
    default = tmp_path / "model" / "agf_coefficients.png"
    assert default.read_bytes().startswith(PNG_MAGIC)
    assert str(default) in capsys.readouterr().out
    explicit = tmp_path / "plots" / "curves.png"
    assert main(["plot-agf", str(tmp_path / "model"), "-o", str(explicit)]) == 0
    assert explicit.read_bytes().startswith(PNG_MAGIC)


def test_cli_refuses_model_without_agf_coefficient(tmp_path, capsys):
    tiny_agf(position_encoding="alibi").save_pretrained(tmp_path / "alibi")
    assert main(["plot-agf", str(tmp_path / "alibi")]) == 2
    assert "no AGF coefficient" in capsys.readouterr().err
    assert main(["plot-agf", str(tmp_path / "missing")]) == 2


def test_plot_shared_parameters_and_titles(tmp_path):
    model = tiny_agf(agf_share_across_layers=True, agf_cross_attention="relative")
    assert sorted(model.coefficient_curves(4)) == [
        "model.decoder.cross_position_encoding",
        "model.decoder.position_encoding",
        "model.encoder.position_encoding",
    ]
    path = plot_coefficient_curves(model, tmp_path / "shared.png", max_distance=4)
    assert path.read_bytes().startswith(PNG_MAGIC)
    assert panel_title("model.decoder.layers.1.encoder_attn.value_coefficient") == "decoder 1 cross-attention (PCM-V)"
    assert panel_title("model.encoder.position_encoding") == "encoder all layers self-attention"
    assert panel_title("model.decoder.cross_position_encoding") == "decoder all layers cross-attention"
    assert torch.all(model.coefficient_curves(4)["model.encoder.position_encoding"][1] > 0)


def test_initial_curves_and_how_far_training_moved_them():
    from plldr_hf.models.agf.plots import coefficient_change

    model = tiny_agf(pcmv=True, agf_amplitude_max_distance=4)
    trained, initial = model.coefficient_curves(8), model.coefficient_curves(8, initial=True)
    assert sorted(trained) == sorted(initial)
    for name in trained:
        assert torch.allclose(trained[name][1], initial[name][1])
    assert coefficient_change(model)["max_abs_log_change"] < 1e-6
    # move one head's exponent: the initial curves stay where they were, the change is found and located
    with torch.no_grad():
        model.model.encoder.layers[1].self_attn.position_encoding.exponent[2].add_(0.5)
    change = coefficient_change(model, max_distance=8)
    assert change["module"] == "encoder 1 self-attention" and change["head"] == 2
    # |Δ log c| = Δk · log1p(|δ|/r) at the largest distance, 8
    radius = torch.nn.functional.softplus(
        model.model.encoder.layers[1].self_attn.position_encoding.radius_raw[2, 0].detach()
    )
    expected = 0.5 * torch.log1p(8 / (radius + 0.05))
    assert abs(change["max_abs_log_change"] - float(expected)) < 1e-4
    assert torch.allclose(
        model.coefficient_curves(8, initial=True)[next(iter(initial))][1], initial[next(iter(initial))][1]
    )
    assert coefficient_change(tiny_agf(position_encoding="rope")) is None


def test_plot_agf_writes_a_png_whatever_the_output_suffix(tmp_path, capsys):
    from plldr_hf.cli import main
    from tests.utils import tiny_agf

    tiny_agf().save_pretrained(tmp_path / "model")
    for given, written in (("curves.png", "curves.png"), ("curves", "curves.png"), ("curves.pdf", "curves.pdf")):
        assert main(["plot-agf", str(tmp_path / "model"), "--output", str(tmp_path / given)]) == 0
        assert capsys.readouterr().out.strip() == str(tmp_path / written)
        assert (tmp_path / written).stat().st_size > 0
    assert not list(tmp_path.glob(".partial-*"))
