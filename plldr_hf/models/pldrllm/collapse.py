"""Collapse of a PLDR-LLM: measure whether G_LM is input-invariant, then freeze one G per layer and head.

Trained PLDR-LLMs often produce (nearly) the same deductive outputs for every input; G_LM can then replace the metric
learner at inference (arXiv 2502.13502), and the model runs as scaled-dot-product attention with q' = q_rot·G.
The order parameter of arXiv 2603.23539 measures how far a model is from that:

| quantity              | definition                                                   | code                       |
|-----------------------|--------------------------------------------------------------|----------------------------|
| SOC order parameter   | RMSE(x − x_ref) / abs(mean(x_ref)) per layer; max over layers | `order_parameter_soc`      |
| audit order parameter | RMS(x1 − x2) / ½(RMS(x1) + RMS(x2)), bounded by 2            | `order_parameter_rms`      |
| calibration inputs    | `[eos]` (the frozen reference) + seeded random sequences     | `default_calibration`      |
| report                | both, per tensor and per layer; logits before vs after       | `PldrllmCollapseReport`    |

`collapse_model` is what `PldrllmForCausalLM.collapse()` runs. This file is remote code (copied next to the weights
by `save_pretrained`, so a collapsed checkpoint can be made and measured from the Hub files alone): it imports only
torch, transformers and its siblings.
"""

import copy
import numbers
from dataclasses import asdict, dataclass

import torch

from .configuration_pldrllm import PldrllmConfig, check_field
from .plga import PlgaState


DEDUCTIVE_TENSORS = ("A", "A_LM", "A_P", "G_LM")


# room that the default calibration inputs leave for the 16-token greedy continuation of `plldr_hf.models.pldrllm.diagnostics`
CALIBRATION_ROOM = 16


def default_calibration(config: PldrllmConfig) -> list[list[int]]:
    """The calibration inputs of `collapse()`, `plldr_hf.models.pldrllm.diagnostics.diagnose` and the training report: the empty
    prompt `[eos]` of the v510Gi recipe (the value frozen, as the reference of the measurement) plus seeded random
    sequences of 8–96 tokens that leave `CALIBRATION_ROOM` positions for a continuation."""
    generator = torch.Generator().manual_seed(0)
    low = min(6, config.vocab_size - 1)
    longest = max(1, config.max_position_embeddings - CALIBRATION_ROOM)
    sequences = [[config.eos_token_id if config.eos_token_id is not None else low]]
    for n in (8, 16, 24, 32, 48, 64, 96):
        if n <= longest:
            sequences.append(torch.randint(low, config.vocab_size, (n,), generator=generator).tolist())
    return sequences


def calibration_ids(config: PldrllmConfig, calibration, tokenizer=None, owner: str = "collapse()") -> list[list[int]]:
    """The calibration inputs of `collapse()` and `plldr_hf.models.pldrllm.diagnostics.diagnose` as lists of ids (empty ones
    dropped): None → `default_calibration(config)`; texts (with `tokenizer`, no special tokens); a 2D id tensor, one
    sequence per row; or lists of ids."""
    if calibration is None:
        sequences = default_calibration(config)
    elif isinstance(calibration, str) or (
        isinstance(calibration, (list, tuple)) and calibration and isinstance(calibration[0], str)
    ):
        if tokenizer is None:
            raise ValueError(f"{owner}: calibration texts need a `tokenizer`")
        texts = [calibration] if isinstance(calibration, str) else list(calibration)
        sequences = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    elif isinstance(calibration, torch.Tensor):
        if calibration.dim() != 2 or calibration.is_floating_point() or calibration.dtype == torch.bool:
            raise ValueError(
                f"{owner}: calibration ids must be an integer tensor of shape (N, S), got {calibration.dtype} of "
                f"shape {tuple(calibration.shape)}"
            )
        sequences = calibration.tolist()
    else:
        try:
            sequences = [list(ids) for ids in calibration]
        except TypeError:
            sequences = None
        if sequences is None or not all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) for seq in sequences for i in seq
        ):
            raise ValueError(
                f"{owner}: calibration must be texts (with a tokenizer), a 2-D tensor of token ids or lists of token "
                f"ids, got {type(calibration).__name__}"
            )
    return [[int(i) for i in seq] for seq in sequences if len(seq) > 0]


def order_parameter_soc(samples: torch.Tensor, reference: torch.Tensor) -> float:
    """SOC-paper order parameter RMSE(x − x_ref) / |mean(x_ref)|, pooled over every value given (float64).

    0 for an input-invariant tensor; published values run from 0 (SOC-110M-5) to ~10² (sub-critical models).
    """
    rmse = (samples.double() - reference.double()).pow(2).mean().sqrt()
    if rmse == 0:
        return 0.0
    return (rmse / reference.double().mean().abs()).item()


def order_parameter_by_layer(samples: torch.Tensor, reference: torch.Tensor) -> tuple[float, list[float], float]:
    """The SOC order parameter of `samples` (N, L, ...) against `reference` (N or 1, L, ...) under each aggregation:
    (maximum over layers, one value per layer, pooled over all layers)."""
    per_layer = [order_parameter_soc(samples[:, layer], reference[:, layer]) for layer in range(samples.shape[1])]
    return max(per_layer), per_layer, order_parameter_soc(samples, reference)


def order_parameter_rms(x1: torch.Tensor, x2: torch.Tensor) -> float:
    """Audit order parameter RMS(x1 − x2) / ½(RMS(x1) + RMS(x2)) (float64); bounded by 2, not comparable with
    the SOC definition."""
    diff = (x1.double() - x2.double()).pow(2).mean().sqrt()
    if diff == 0:
        return 0.0
    scale = 0.5 * (x1.double().pow(2).mean().sqrt() + x2.double().pow(2).mean().sqrt())
    return (diff / scale).item()


@dataclass
class PldrllmCollapseReport:
    """What `collapse()` measured on its calibration inputs (each input run alone, unpadded, no cache).

    Every order parameter is measured across the calibration inputs (each input's tensor vs the first input's, the
    value frozen), per layer, and aggregated as its name says:

    - `per_layer[name]`: SOC definition, one value per layer (pooled over that layer's heads and the inputs).
    - `order_parameter[name]`: the maximum of `per_layer[name]` over the layers: the headline, and what `collapse()`
      compares with `tolerance` (on G_LM): every layer must be input-invariant on its own scale.
    - `order_parameter_pooled[name]`: SOC definition pooled over all layers at once (one RMSE over one |mean|; layers
      whose means differ in sign can make it far larger than any layer's value).
    - `per_layer_rms[name]` / `order_parameter_rms[name]`: audit definition, max over input pairs, per layer / max
      over layers.

    `max_abs_logit_diff` / `argmax_agreement`: collapsed vs uncollapsed logits on the calibration inputs (None when
    the model was not collapsed).
    """

    num_calibration: int
    tolerance: float
    forced: bool
    order_parameter: dict
    order_parameter_rms: dict
    per_layer: dict
    per_layer_rms: dict
    order_parameter_pooled: dict
    max_abs_logit_diff: float | None = None
    argmax_agreement: float | None = None

    # what each saved number aggregates (written into `to_dict()`, so a JSON file says it too)
    AGGREGATION = {
        "order_parameter": "SOC RMSE/abs(mean), across calibration inputs, max over layers (collapse criterion)",
        "per_layer": "SOC RMSE/abs(mean), across calibration inputs, per layer",
        "order_parameter_pooled": "SOC RMSE/abs(mean), across calibration inputs, pooled over all layers",
        "order_parameter_rms": "audit RMS(x1-x2)/mean RMS, max over calibration input pairs and layers",
        "per_layer_rms": "audit RMS(x1-x2)/mean RMS, max over calibration input pairs, per layer",
    }

    @property
    def invariant(self) -> bool:
        """True when G_LM varies less than the tolerance in every layer (SOC across inputs, max over layers)."""
        return self.order_parameter["G_LM"] <= self.tolerance

    def to_dict(self) -> dict:
        return {**asdict(self), "invariant": self.invariant, "aggregation": dict(self.AGGREGATION)}

    def __str__(self) -> str:
        lines = [
            f"collapse report: {self.num_calibration} calibration inputs, tolerance {self.tolerance:g} on G_LM's "
            f"order parameter (SOC, across inputs, max over layers), invariant: {self.invariant}"
            + (" (forced)" if self.forced else ""),
            "",
            "| tensor | order parameter (SOC across inputs, max over layers) | SOC across inputs, per layer "
            "| SOC across inputs, pooled over layers | audit RMS (max over pairs and layers) |",
            "|---|---|---|---|---|",
        ]
        for name in DEDUCTIVE_TENSORS:
            per_layer = ", ".join(f"{v:.3g}" for v in self.per_layer[name])
            lines.append(
                f"| {name} | {self.order_parameter[name]:.3g} | {per_layer} | {self.order_parameter_pooled[name]:.3g} "
                f"| {self.order_parameter_rms[name]:.3g} |"
            )
        if self.max_abs_logit_diff is not None:
            lines += [
                "",
                f"collapsed vs uncollapsed logits: max |Δlogit| {self.max_abs_logit_diff:.3g}, "
                f"argmax agreement {100 * self.argmax_agreement:.2f}%",
            ]
        return "\n".join(lines)


def own_config(model) -> None:
    """Give `model` a config object of its own before `collapse()` / `uncollapse()` change it: models built from
    one config object share it (every submodule holds the same reference), and another model must not see this
    one's G frozen. A deep copy replaces the reference in every submodule that holds it."""
    shared = model.config
    config = copy.deepcopy(shared)
    for module in model.modules():
        if getattr(module, "config", None) is shared:
            module.config = config


def calibration_sequences(model, calibration, tokenizer) -> list[torch.Tensor]:
    """The calibration inputs of `collapse_model` as (1, S) id tensors on the model's device, checked."""
    cfg = model.config
    device = model.get_input_embeddings().weight.device
    sequences = calibration_ids(cfg, calibration, tokenizer, "collapse()")
    if len(sequences) < 2:
        raise ValueError(f"collapse(): need at least 2 non-empty calibration inputs, got {len(sequences)}")
    too_long = [len(seq) for seq in sequences if len(seq) > cfg.max_position_embeddings]
    if too_long:
        raise ValueError(
            f"collapse(): calibration inputs of length {too_long} exceed max_position_embeddings="
            f"{cfg.max_position_embeddings}"
        )
    return [torch.tensor([seq], dtype=torch.long, device=device) for seq in sequences]


def measure_invariance(per_input: list, tolerance: float, force: bool) -> PldrllmCollapseReport:
    """Both order parameters of each deductive tensor from `per_input[n][i]` (L, H, d, d): input n, tensor i in
    `DEDUCTIVE_TENSORS` order; the first input is the reference (and the value `collapse_model` freezes)."""
    order, pooled, order_rms, per_layer, per_layer_rms = {}, {}, {}, {}, {}
    for i, name in enumerate(DEDUCTIVE_TENSORS):
        samples = torch.stack([sample[i] for sample in per_input])  # (N, L, H, d, d)
        # the first input is the reference and the value frozen (the empty prompt [eos] by default, as in the
        # v510Gi recipe), so an invariant model collapses bit-exactly
        reference = samples[:1]
        num_layers = samples.shape[1]
        order[name], per_layer[name], pooled[name] = order_parameter_by_layer(samples, reference)
        pairs = [(a, b) for a in range(len(per_input)) for b in range(a + 1, len(per_input))]
        per_layer_rms[name] = [
            max(order_parameter_rms(samples[a, layer], samples[b, layer]) for a, b in pairs)
            for layer in range(num_layers)
        ]
        order_rms[name] = max(per_layer_rms[name])
    return PldrllmCollapseReport(
        num_calibration=len(per_input),
        tolerance=tolerance,
        forced=force,
        order_parameter=order,
        order_parameter_rms=order_rms,
        per_layer=per_layer,
        per_layer_rms=per_layer_rms,
        order_parameter_pooled=pooled,
    )


@torch.no_grad()
def collapse_model(model, calibration=None, tolerance: float = 1e-3, force: bool = False, tokenizer=None):
    """`PldrllmForCausalLM.collapse()`: measure on the calibration inputs, refuse with the numbers unless G_LM is
    invariant (or `force`), freeze the first input's state in `model.decoder` and compare the logits."""
    cfg = model.config
    check_field("collapse(): ", "tolerance", tolerance, "number", low=0.0)
    if cfg.custom_G_type is not None:
        raise ValueError(f"collapse(): this model already has a fixed G (custom_G_type={cfg.custom_G_type!r})")
    if cfg.collapsed:
        raise ValueError("collapse(): the model is already collapsed; call uncollapse() first")
    if any(hasattr(module, "base_layer") for module in model.modules()):
        raise ValueError("collapse(): the model carries PEFT adapters; call merge_and_unload() before collapse()")
    sequences = calibration_sequences(model, calibration, tokenizer)
    was_training = model.training
    model.eval()
    try:
        per_input, reference_logits = [], []
        for ids in sequences:
            out = model(ids, use_cache=False, output_pldr_attentions=True)
            # (L, H, d, d) per tensor type for this input
            per_input.append([torch.stack([layer[i][0] for layer in out.pldr_attentions]) for i in range(4)])
            reference_logits.append(out.logits)
        report = measure_invariance(per_input, tolerance, force)
        if not report.invariant and not force:
            raise ValueError(
                f"collapse() refused: G_LM is not input-invariant on {len(sequences)} calibration inputs; "
                f"order parameter (SOC RMSE/|mean| across inputs, max over layers): "
                + ", ".join(f"{k} {v:.3g}" for k, v in report.order_parameter.items())
                + "; symmetric RMS: "
                + ", ".join(f"{k} {v:.3g}" for k, v in report.order_parameter_rms.items())
                + f". Tolerance on G_LM: {tolerance:g}. Pass force=True to collapse anyway (an approximation)."
            )
        # the first input's state per layer, (H, d, d) each
        reference = per_input[0]
        model.decoder.freeze_g(
            [PlgaState(*(reference[i][layer] for i in range(4))) for layer in range(cfg.num_hidden_layers)]
        )
        own_config(model)
        model.config.collapsed = True
        max_diff, agree, total = 0.0, 0, 0
        for ids, ref in zip(sequences, reference_logits):
            logits = model(ids, use_cache=False).logits
            max_diff = max(max_diff, (logits.float() - ref.float()).abs().max().item())
            agree += (logits.argmax(-1) == ref.argmax(-1)).sum().item()
            total += ids.numel()
        report.max_abs_logit_diff, report.argmax_agreement = max_diff, agree / total
    finally:
        model.train(was_training)
    return report
