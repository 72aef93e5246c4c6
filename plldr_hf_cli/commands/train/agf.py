"""`plldr-hf train agf`: train an AGF-family translation model with `Seq2SeqTrainer` (`plldr_hf.training.seq2seq`).

The flags are generated from `plldr_hf.training.options.TranslationOptions` (one per field;
`plldr_hf_cli.arguments.add_option_flags`, shared with `train pldrllm`), so an option and its default are written
once; `--tiny` and `--dataset wmt17` start from the presets of the same name. Building the parser imports no torch.
"""

import argparse

from plldr_hf_cli.arguments import (
    add_option_flags,
    fail,
    load_light_module,
    options_from_args,
    refuse_run_paths,
    show_pipeline_logs,
)
from plldr_hf_cli.output import add_overwrite_flag, run_in_folder


POSITION_ENCODINGS = tuple(load_light_module("plldr_hf.models.agf.position_encodings").POSITION_ENCODINGS)


def _options_module():
    return load_light_module("plldr_hf.training.options")


def register(families) -> None:
    parser = families.add_parser(
        "agf",
        help="AGF / PCM-V translation model (and its position-encoding baselines)",
        description=(
            "Train an encoder-decoder translation model (model_type agf) with Seq2SeqTrainer: joint subword "
            "tokenizer, label smoothing, inverse-sqrt schedule, BLEU / chrF / token accuracy on evaluation, "
            "checkpoints, TensorBoard logs. Works unchanged under torchrun and accelerate launch. --dataset wmt17 "
            "starts from the wmt17 preset (base size, 32k vocabulary, 256-sentence batches, beam 4 with length "
            "penalty 0.6)."
        ),
    )
    options = _options_module()
    tiny = ", ".join(f"{key} {value}" for key, value in options.PRESETS["agf"]["tiny"]["run"].items())
    parser.add_argument(
        "--tiny", action="store_true", help=f"CPU smoke run: the tiny preset ({tiny}); flags still win"
    )
    add_option_flags(parser, options.TranslationOptions)
    add_overwrite_flag(parser, "--output-dir")
    parser.set_defaults(func=run)


def options_from(args: argparse.Namespace):
    """`TranslationOptions` from parsed flags: the `tiny` preset with `--tiny`, the `wmt17` preset for
    `--dataset wmt17`, else the field defaults; then every flag given."""
    options = _options_module()
    dataset = getattr(args, "dataset", None) or []
    wmt17 = len(dataset) == 1 and dataset[0].lower() in ("wmt17", "wmt/wmt17")
    preset = "tiny" if getattr(args, "tiny", False) else "wmt17" if wmt17 else None
    return options_from_args(args, options.TranslationOptions, preset)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    try:
        options = options_from(args).resolved()
    except ValueError as error:
        return fail("train agf", error)
    refused = refuse_run_paths("train agf", options)
    if refused:
        return refused
    if options.wmt17_dir and not Path(options.wmt17_dir).is_dir():
        return fail("train agf", f"--wmt17-dir: {options.wmt17_dir} is not a folder; give the local copy of wmt/wmt17")

    from plldr_hf.training.recipes import translation_arguments_of

    # the pipeline's own progress lines (data, tokenizer, model size); transformers keeps its verbosity
    show_pipeline_logs()
    try:
        training_args = translation_arguments_of(options)
    except (TypeError, ValueError) as err:
        return fail("train agf", f"invalid training arguments: {err}")

    status = run_in_folder(
        "train agf",
        options.output_dir,
        lambda: _train(options, training_args),
        overwrite=args.overwrite,
        resume=bool(options.resume),
    )
    if status:
        return status
    print(f"model, tokenizer and scores saved in {options.output_dir}")
    return 0


def _train(options, training_args) -> None:
    from plldr_hf.models import FAMILIES

    # the family's training entry point: plldr_hf.training.seq2seq.train_translation
    FAMILIES["agf"].entry_point("train")(options, training_args=training_args)
