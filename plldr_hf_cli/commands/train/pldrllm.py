"""`plldr-hf train pldrllm`: train a PLDR-LLM causal LM with Trainer (`plldr_hf.training.causal_lm`).

The flags are generated from `plldr_hf.training.options.TrainOptions` (one per field, with the help and checks in the
field's metadata), so an option is written once. That module imports only the standard library and is loaded here
without importing `plldr_hf` (which imports torch): `--help` and usage errors stay fast.
"""

import argparse
import dataclasses
import logging
from pathlib import Path

from plldr_hf_cli.arguments import (
    fail,
    load_light_module,
    missing_dataset_files,
    non_negative_int,
    positive_float,
    positive_int,
    run_creating,
)


def load_options_module():
    """`plldr_hf.training.options`, without importing torch (`plldr_hf_cli.arguments.load_light_module`)."""
    return load_light_module("plldr_hf.training.options")


def register(families) -> None:
    parser = families.add_parser(
        "pldrllm",
        help="PLDR-LLM causal language model (Power Law Graph Attention)",
        description=(
            "Train a PLDR-LLM from scratch on the embedded Shakespeare corpus, local text files or a Hugging Face "
            "dataset, with the reference recipe (AdamW 0.9/0.95, eps 1e-5, weight decay 0.1, clipping 1.0, warm-up "
            "then cosine to 10%) and the optional DAG regulariser. Writes checkpoints, the final model and "
            "tokenizer, loss_curves.png and train_report.json (validation perplexity, order parameter) to "
            "--output-dir. Runs unchanged under `torchrun` and `accelerate launch`."
        ),
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def _flag_type(annotation: str, meta: dict, options):
    if "parse" in meta:
        parse = getattr(options, meta["parse"])

        def typed(text):
            try:
                return parse(text)
            except ValueError as err:
                raise argparse.ArgumentTypeError(str(err)) from None

        return typed
    if annotation.startswith("int"):
        return {1: positive_int, 0: non_negative_int}.get(meta.get("min"), int)
    if annotation.startswith("float"):
        return positive_float if meta.get("min") == 0 else float
    return None


def add_arguments(parser) -> None:
    """Adds the `train pldrllm` flags (one per `TrainOptions` field, default None = the field's default) and
    `--tiny` to an argparse parser."""
    options = load_options_module()
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="CPU smoke run in seconds: tiny model, 2000 documents, 512-piece tokenizer, 30 steps (flags still win)",
    )
    for spec in dataclasses.fields(options.TrainOptions):
        meta = dict(spec.metadata)
        if meta.pop("cli", True) is False:
            continue
        flag = "--" + spec.name.replace("_", "-")
        kwargs = {"default": None, "help": meta.pop("help", None), "dest": spec.name}
        annotation = str(spec.type)
        if meta.pop("action", None) == "boolean_optional":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif annotation == "bool":
            kwargs["action"] = "store_true"
        else:
            kwargs["type"] = _flag_type(annotation, meta, options)
            for key in ("choices", "metavar", "nargs", "const"):
                if key in meta:
                    kwargs[key] = meta[key]
        parser.add_argument(flag, **kwargs)


def options_from_args(args: argparse.Namespace):
    """`TrainOptions` from parsed flags: the field defaults, then `--tiny`'s, then every flag given."""
    options = load_options_module()
    given = {
        spec.name: getattr(args, spec.name)
        for spec in dataclasses.fields(options.TrainOptions)
        if getattr(args, spec.name, None) is not None
    }
    base = options.TINY_RUN if getattr(args, "tiny", False) else {}
    return options.TrainOptions(**{**base, **given})


def _sig(value) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def train_and_report(args: argparse.Namespace) -> int:
    """Train from parsed flags and print the headline numbers (also `examples/train_pldr_llm.py`)."""
    from plldr_hf.training.causal_lm import train_causal_lm

    # the pipeline's own progress lines; other libraries (accelerate, datasets) stay at WARNING
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("plldr_hf").setLevel(logging.INFO)
    options = options_from_args(args)
    report = train_causal_lm(options)
    if report:
        before = ((report.get("order_parameter_before") or {}).get("across_inputs") or {}).get("G_LM")
        after = ((report.get("order_parameter_after") or {}).get("across_inputs") or {}).get("G_LM")
        print(f"validation perplexity: {report['validation_perplexity']:.3g}")
        if before is not None or after is not None:
            print(
                "G_LM order parameter (SOC RMSE/|mean| across the calibration inputs, the collapse criterion): "
                f"before {_sig(before)}, after {_sig(after)}"
            )
        print(f"{_sig(report.get('s_per_step'))} s/step (train_runtime / steps)")
        print(f"report: {Path(options.output_dir, 'train_report.json')}; curves: {report['loss_curves']}")
    return 0


def run(args: argparse.Namespace) -> int:
    missing = missing_dataset_files(args.dataset)
    if missing:
        return fail("train pldrllm", f"--dataset: {missing[0]} does not exist; give existing files or folders")
    output_dir = args.output_dir or load_options_module().TrainOptions.output_dir
    return run_creating("train pldrllm", output_dir, lambda: train_and_report(args))
