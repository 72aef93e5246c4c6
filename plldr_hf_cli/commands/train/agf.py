"""`plldr-hf train agf`: the AGF translation model's flags and summary (`plldr_hf.training.seq2seq` trains it).

The flags are generated from `plldr_hf.training.options.TranslationOptions` (one per field;
`plldr_hf_cli.arguments.add_option_flags`, shared with `train pldrllm`), so an option and its default are written
once; `--tiny` and `--dataset wmt17` start from the presets of the same name. Building the parser imports no torch.
The run itself is the command path of every family (`plldr_hf_cli/commands/train/__init__.py`).
"""

import argparse

from plldr_hf_cli.arguments import add_option_flags, add_recipe_flags, load_light_module, options_from_args, recipe_of
from plldr_hf_cli.output import add_overwrite_flag


POSITION_ENCODINGS = tuple(load_light_module("plldr_hf.models.agf.position_encodings").POSITION_ENCODINGS)


def _options_module():
    return load_light_module("plldr_hf.training.options")


def register(families):
    parser = families.add_parser(
        "agf",
        help="AGF / PCM-V translation model (and its position-encoding baselines)",
        description=(
            "Train an encoder-decoder translation model (model_type agf) from scratch, or fine-tune one (--init-from, "
            "whole or with --lora-r), with Seq2SeqTrainer: joint subword "
            "tokenizer, label smoothing, inverse-sqrt schedule, BLEU / chrF / token accuracy on evaluation, "
            "checkpoints, TensorBoard logs. Works unchanged under torchrun and accelerate launch. --dataset wmt17 "
            "starts from the wmt17 preset (base size, 32k vocabulary, 256-sentence batches, beam 4 with length "
            "penalty 0.6)."
        ),
    )
    options = _options_module()
    add_recipe_flags(parser, options.TranslationOptions)
    add_option_flags(parser, options.TranslationOptions)
    add_overwrite_flag(parser, "--output-dir")
    return parser


def options_class():
    """The options dataclass of this family's runs."""
    return _options_module().TranslationOptions


def options_from(args: argparse.Namespace):
    """`TranslationOptions` from parsed flags: the recipe of `--recipe` / `--tiny`, the `wmt17` recipe for
    `--dataset wmt17`, else the field defaults; then every flag given."""
    options = _options_module()
    wmt17 = options.is_wmt17(getattr(args, "dataset", None))
    return options_from_args(args, options.TranslationOptions, recipe_of(args, "wmt17" if wmt17 else None))


def summary(report) -> list[str]:
    """What a finished run saved (the test scores were printed as they were computed)."""
    return [f"model, tokenizer and scores saved in {report.output_dir}"]
