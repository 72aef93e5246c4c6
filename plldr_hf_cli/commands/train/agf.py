"""`plldr-hf train agf`: the AGF translation model's command (`plldr_hf.training.seq2seq` trains it).

The flags are the fields of `plldr_hf.training.options.TranslationOptions`, a `Seq2SeqTrainingArguments` subclass,
read by transformers' `HfArgumentParser`; `--tiny` and `--dataset wmt17` start from the recipes of the same name.
The run itself is the command path of every family (`plldr_hf_cli/commands/train/__init__.py`).
"""

OPTIONS = "TranslationOptions"
DESCRIPTION = dict(
    help="AGF / PCM-V translation model (and its position-encoding baselines)",
    description=(
        "Train an encoder-decoder translation model (model_type agf) from scratch, or fine-tune one (--init-from, "
        "whole or with --lora-r), with Seq2SeqTrainer: joint subword tokenizer, label smoothing, inverse-sqrt "
        "schedule, BLEU / chrF / token accuracy on evaluation, checkpoints, TensorBoard logs. Works unchanged under "
        "torchrun and accelerate launch. --dataset wmt17 starts from the wmt17 recipe (base size, 32k vocabulary, "
        "256-sentence batches, beam 4 with length penalty 0.6)."
    ),
)


def default_recipe(given: dict) -> str | None:
    """The `wmt17` recipe for `--dataset wmt17`, else none (the field defaults)."""
    from plldr_hf.training.options import is_wmt17

    return "wmt17" if is_wmt17(given.get("dataset")) else None


def summary(report) -> list[str]:
    """What a finished run saved (the test scores were printed as they were computed)."""
    return [f"model, tokenizer and scores saved in {report.output_dir}"]
