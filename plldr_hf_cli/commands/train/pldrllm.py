"""`plldr-hf train pldrllm`: the PLDR-LLM causal LM's command (`plldr_hf.training.causal_lm` trains it).

The flags are the fields of `plldr_hf.training.options.TrainOptions`, a `TrainingArguments` subclass, read by
transformers' `HfArgumentParser`. The run itself is the command path of every family
(`plldr_hf_cli/commands/train/__init__.py`).
"""

OPTIONS = "TrainOptions"
DESCRIPTION = dict(
    help="PLDR-LLM causal language model (Power Law Graph Attention)",
    description=(
        "Train a PLDR-LLM from scratch, or fine-tune one (--init-from, whole or with --lora-r), on the embedded "
        "Shakespeare corpus, local text files or a Hugging Face dataset, with the reference recipe (AdamW 0.9/0.95, "
        "eps 1e-5, weight decay 0.1, clipping 1.0, warm-up then cosine to 10%) and the optional DAG regulariser. "
        "Writes checkpoints, the final model and tokenizer, loss_curves.png and train_report.json (validation "
        "perplexity, order parameter) to --output-dir. Runs unchanged under `torchrun` and `accelerate launch`."
    ),
)
default_recipe = None


def _sig(value) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def summary(report) -> list[str]:
    """The headline numbers of a finished run: validation perplexity, the order parameter, seconds per step."""

    def g_lm(key):
        return ((report.diagnostics.get(key) or {}).get("across_inputs_max_over_layers") or {}).get("G_LM")

    validation = report.scores["validation"]
    before = validation.get("perplexity_before")
    lines = [
        f"validation perplexity: {validation['perplexity']:.3g}"
        + (f" (the base model before fine-tuning: {before:.3g})" if before is not None else "")
    ]
    before, after = g_lm("order_parameter_before"), g_lm("order_parameter_after")
    if before is not None or after is not None:
        real = g_lm("order_parameter_after_real_text")
        lines.append(
            "G_LM order parameter (SOC RMSE/|mean| across the calibration inputs, max over layers; the collapse "
            f"criterion): before {_sig(before)}, after {_sig(after)}"
            + (f" (on held-out validation text: {_sig(real)})" if real is not None else "")
        )
        stages = (report.diagnostics.get("order_parameter_after") or {}).get("stages_of_the_headline_layer")
        if stages:
            from plldr_hf.models.pldrllm.stages import LABELS

            chain = ", ".join(
                f"{LABELS[key]} {_sig(stages[f'relative_{key}'])}" for key in ("gram_ln", "A", "A_LM", "A_P", "G_LM")
            )
            lines.append(
                f"where G varies (layer {stages['layer']}, relative spread across inputs): {chain}; "
                f"SOC = {_sig(stages['G_LM_soc_numerator_rmse'])} / |mean| {_sig(stages['G_LM_soc_denominator_abs_mean'])}"
            )
    lines.append(f"{_sig(report.seconds_per_step)} s/step (train_runtime / steps)")
    return lines
