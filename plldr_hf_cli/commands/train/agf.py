"""`plldr-hf train agf`: train an AGF-family translation model with `Seq2SeqTrainer` (`plldr_hf.training.seq2seq`)."""

import argparse
import json
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


POSITION_ENCODINGS = tuple(load_light_module("plldr_hf.models.agf.position_encodings").POSITION_ENCODINGS)
SIZES = ("tiny", "small", "base")

# --tiny: a CPU smoke run in well under a minute; explicit flags still win
TINY_DEFAULTS = dict(
    size="tiny",
    vocab_size=300,
    max_train_samples=2000,
    max_eval_samples=32,
    max_test_samples=32,
    max_source_length=32,
    max_target_length=32,
    max_steps=30,
    eval_steps=30,
    save_steps=30,
    logging_steps=5,
    warmup_steps=5,
    learning_rate=3e-3,
    batch_size=16,
    num_beams=1,
    length_penalty=1.0,
)
DEFAULTS = dict(
    size="base",
    vocab_size=8000,
    max_train_samples=None,
    max_eval_samples=None,
    max_test_samples=None,
    max_source_length=128,
    max_target_length=128,
    max_steps=-1,
    eval_steps=1000,
    save_steps=1000,
    logging_steps=50,
    warmup_steps=1000,
    learning_rate=5e-4,
    batch_size=32,
    num_beams=4,
    length_penalty=1.0,
)
# --dataset wmt17 (5.9M pairs; a GPU run): the paper's 3+3-layer base model with a WMT-sized vocabulary, batches
# of about 8k tokens (256 sentences of ~30 subwords, length-bucketed), a long warm-up, beam 4 with length penalty
# 0.6 for the test scores; evaluation during training decodes 1,000 newstest2016 segments greedily
WMT17_DEFAULTS = dict(
    DEFAULTS,
    vocab_size=32000,
    max_eval_samples=1000,
    max_steps=100_000,
    eval_steps=5000,
    save_steps=5000,
    logging_steps=100,
    warmup_steps=4000,
    learning_rate=7e-4,
    batch_size=256,
    length_penalty=0.6,
)


def _key_value(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def register(families) -> None:
    parser = families.add_parser(
        "agf",
        help="AGF / PCM-V translation model (and its position-encoding baselines)",
        description=(
            "Train an encoder-decoder translation model (model_type agf) with Seq2SeqTrainer: joint subword "
            "tokenizer, label smoothing, inverse-sqrt schedule, BLEU / chrF / token accuracy on evaluation, "
            "checkpoints, TensorBoard logs. Works unchanged under torchrun and accelerate launch."
        ),
    )
    model = parser.add_argument_group("model")
    model.add_argument("--position", choices=POSITION_ENCODINGS, default="agf", help="position encoding [%(default)s]")
    model.add_argument("--pcmv", action="store_true", help="PCM-V: weight the values by the AGF coefficient")
    model.add_argument("--size", choices=SIZES, help="named model size (base: 512-d, 8 heads, 3+3 layers) [base]")
    model.add_argument(
        "--label-smoothing", type=float, default=0.1, help="label smoothing of the training loss [%(default)s]"
    )
    model.add_argument(
        "--set",
        dest="model_overrides",
        metavar="FIELD=VALUE",
        type=_key_value,
        action="append",
        default=[],
        help="any other AgfConfig field, e.g. --set dropout=0.3 --set agf_learn_base=true (repeatable)",
    )

    data = parser.add_argument_group("data")
    data.add_argument(
        "--dataset",
        nargs="+",
        default=["libreoffice"],
        help="libreoffice (embedded, offline), wmt17 (Hugging Face Hub), or .json/.jsonl(.gz)/.parquet files or "
        "folders; SPLIT=PATH names a file's split [libreoffice]",
    )
    data.add_argument(
        "--wmt17-dir",
        metavar="DIR",
        help="with --dataset wmt17: a local copy of the Hub dataset wmt/wmt17 (hf download wmt/wmt17 --repo-type "
        'dataset --include "de-en/*" --local-dir DIR) instead of the Hub',
    )
    data.add_argument("--source-lang", default="en", help="[%(default)s]")
    data.add_argument("--target-lang", default="de", help="[%(default)s]")
    data.add_argument("--tokenizer", help="reuse this tokenizer folder instead of training one")
    data.add_argument("--vocab-size", type=positive_int, help="size of the trained joint vocabulary [8000]")
    data.add_argument("--tokenizer-model", choices=("bpe", "unigram"), default="bpe", help="[%(default)s]")
    data.add_argument("--max-source-length", type=positive_int, help="source truncation in subwords [128]")
    data.add_argument("--max-target-length", type=positive_int, help="target truncation and generation limit [128]")
    data.add_argument("--max-train-samples", type=positive_int, help="fixed random subset of the training split")
    data.add_argument("--max-eval-samples", type=positive_int, help="subset of the validation split")
    data.add_argument("--max-test-samples", type=positive_int, help="subset of each test split")

    train = parser.add_argument_group("training")
    train.add_argument("--output-dir", help="where the model and checkpoints go [runs/agf-POSITION[-pcmv]]")
    train.add_argument(
        "--max-steps", type=positive_int, help="stop after this many optimizer steps (overrides --epochs)"
    )
    train.add_argument(
        "--epochs", type=positive_float, default=10.0, help="training epochs without --max-steps [%(default)s]"
    )
    train.add_argument("--batch-size", type=positive_int, help="per-device training batch size [32]")
    train.add_argument("--eval-batch-size", type=positive_int, default=64, help="[%(default)s]")
    train.add_argument("--grad-accum", type=positive_int, default=1, help="gradient accumulation steps [%(default)s]")
    train.add_argument("--learning-rate", "--lr", type=positive_float, help="peak learning rate [5e-4]")
    train.add_argument(
        "--scheduler",
        default="inverse_sqrt",
        help="transformers scheduler: inverse_sqrt, linear, cosine, ... [%(default)s]",
    )
    train.add_argument("--warmup-steps", type=non_negative_int, help="linear warm-up steps [1000]")
    train.add_argument("--weight-decay", type=float, default=0.0, help="[%(default)s]")
    train.add_argument("--eval-steps", type=positive_int, help="evaluate every N steps [1000]")
    train.add_argument("--save-steps", type=positive_int, help="checkpoint every N steps [1000]")
    train.add_argument("--logging-steps", type=positive_int, help="log every N steps [50]")
    train.add_argument("--num-beams", type=positive_int, help="beam size of the final test scoring [4]")
    train.add_argument(
        "--length-penalty", type=float, help="beam-search length penalty of the test scoring [1.0; wmt17: 0.6]"
    )
    train.add_argument(
        "--no-bucketing",
        dest="bucket_by_length",
        action="store_false",
        help="random training batches instead of length-bucketed ones (2-3x the padding)",
    )
    train.add_argument("--seed", type=non_negative_int, default=42, help="[%(default)s]")
    train.add_argument("--bf16", action=argparse.BooleanOptionalAction, help="bf16 mixed precision [when available]")
    train.add_argument("--cpu", action="store_true", help="train on the CPU even if a GPU is present")
    train.add_argument(
        "--resume",
        nargs="?",
        const=True,
        metavar="CHECKPOINT",
        help="continue from the last checkpoint in --output-dir, or from CHECKPOINT",
    )
    train.add_argument("--report-to", help="Trainer report_to: tensorboard, none, ... [tensorboard if installed]")
    train.add_argument("--no-progress", action="store_true", help="no progress bars")
    train.add_argument(
        "--trainer-arg",
        metavar="KEY=VALUE",
        type=_key_value,
        action="append",
        default=[],
        help="any other Seq2SeqTrainingArguments field, e.g. --trainer-arg save_total_limit=5 (repeatable)",
    )
    parser.add_argument(
        "--tiny", action="store_true", help="CPU smoke run: tiny model, small data, 30 steps (flags still override)"
    )
    parser.set_defaults(func=run)


def is_wmt17(args: argparse.Namespace) -> bool:
    return len(args.dataset) == 1 and args.dataset[0].lower() in ("wmt17", "wmt/wmt17")


def resolve_options(args: argparse.Namespace) -> dict:
    """The run's settings: explicit flags, else the defaults of `--tiny`, of `--dataset wmt17` or the general ones."""
    base = TINY_DEFAULTS if args.tiny else WMT17_DEFAULTS if is_wmt17(args) else DEFAULTS
    opts = {key: getattr(args, key, None) for key in base}
    return {key: base[key] if value is None else value for key, value in opts.items()}


def run(args: argparse.Namespace) -> int:
    import logging

    missing = missing_dataset_files(args.dataset)
    if missing:
        return fail("train agf", f"--dataset: {missing[0]} does not exist; give existing files or folders")

    from plldr_hf.training.recipes import translation_training_arguments

    # the pipeline's own progress lines (data, tokenizer, model size); transformers keeps its verbosity
    logging.basicConfig(format="%(message)s")
    logging.getLogger("plldr_hf").setLevel(logging.INFO)

    if args.wmt17_dir and not is_wmt17(args):
        return fail("train agf", "--wmt17-dir needs --dataset wmt17")
    if args.wmt17_dir and not Path(args.wmt17_dir).is_dir():
        return fail("train agf", f"--wmt17-dir: {args.wmt17_dir} is not a folder; give the local copy of wmt/wmt17")
    opts = resolve_options(args)
    output_dir = args.output_dir or f"runs/agf-{args.position}{'-pcmv' if args.pcmv else ''}"

    overrides = dict(
        per_device_train_batch_size=opts["batch_size"],
        per_device_eval_batch_size=args.eval_batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=opts["learning_rate"],
        lr_scheduler_type=args.scheduler,
        warmup_steps=opts["warmup_steps"],
        weight_decay=args.weight_decay,
        num_train_epochs=args.epochs,
        max_steps=opts["max_steps"],
        eval_steps=opts["eval_steps"],
        save_steps=opts["save_steps"],
        logging_steps=opts["logging_steps"],
        seed=args.seed,
        disable_tqdm=args.no_progress,
    )
    if args.bf16 is not None:
        overrides["bf16"] = args.bf16
    if args.cpu:
        overrides["use_cpu"] = True
    if args.report_to:
        overrides["report_to"] = args.report_to
    overrides.update(dict(args.trainer_arg))
    try:
        training_args = translation_training_arguments(output_dir, **overrides)
    except (TypeError, ValueError) as err:
        return fail("train agf", f"invalid training arguments: {err}")

    status = run_creating("train agf", output_dir, lambda: _train(args, training_args, opts))
    if status:
        return status
    print(f"model, tokenizer and scores saved in {output_dir}")
    return 0


def _train(args: argparse.Namespace, training_args, opts: dict) -> None:
    from plldr_hf.training.seq2seq import train_translation

    train_translation(
        training_args,
        dataset=args.dataset[0] if len(args.dataset) == 1 else args.dataset,
        wmt17_dir=args.wmt17_dir,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
        size=opts["size"],
        position_encoding=args.position,
        pcmv=args.pcmv,
        label_smoothing=args.label_smoothing,
        model_overrides=dict(args.model_overrides),
        tokenizer=args.tokenizer,
        vocab_size=opts["vocab_size"],
        tokenizer_model=args.tokenizer_model,
        max_source_length=opts["max_source_length"],
        max_target_length=opts["max_target_length"],
        max_train_samples=opts["max_train_samples"],
        max_eval_samples=opts["max_eval_samples"],
        max_test_samples=opts["max_test_samples"],
        num_beams=opts["num_beams"],
        length_penalty=opts["length_penalty"],
        bucket_by_length=args.bucket_by_length,
        resume_from_checkpoint=args.resume,
    )
