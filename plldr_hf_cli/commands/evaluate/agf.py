"""`plldr-hf evaluate` for translation models (model_type `agf`): BLEU, chrF and teacher-forced token accuracy."""

import argparse
import json
from pathlib import Path

from plldr_hf_cli.arguments import UsageError, bounded_int, positive_int, refuse_non_finite_scores
from plldr_hf_cli.output import write_file


MODEL_TYPES = ("agf",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("translation models (agf)")
    group.add_argument("--source-lang", default="en", help="[%(default)s]")
    group.add_argument("--target-lang", default="de", help="[%(default)s]")
    group.add_argument("--num-beams", type=positive_int, help="beam size [the model's generation config]")
    group.add_argument(
        "--max-source-length", type=bounded_int(1, 1 << 20), default=128, help="source truncation [%(default)s]"
    )
    group.add_argument(
        "--max-target-length",
        type=bounded_int(1, 1 << 20),
        default=128,
        help="reference truncation for the accuracy, and the generation limit [%(default)s]",
    )
    group.add_argument("--hypotheses", metavar="PATH", help="write the translations, one line per segment")
    group.add_argument("--wmt17-dir", metavar="DIR", help="with --dataset wmt17: a local copy of wmt/wmt17")


def run(args: argparse.Namespace, config: dict) -> int:
    import torch

    from plldr_hf.loading import load_model, load_tokenizer
    from plldr_hf.training.corpus import load_translation_dataset, take_subset
    from plldr_hf.training.translation_trainer import evaluate_translation, format_scores

    model = load_model(args.model_dir, model_type="agf")
    tokenizer = load_tokenizer(args.model_dir, model_config=model.config)
    if torch.cuda.is_available():
        model = model.cuda()
    dataset = args.dataset or ["libreoffice"]
    data = load_translation_dataset(
        dataset[0] if len(dataset) == 1 else dataset, args.source_lang, args.target_lang, wmt17_dir=args.wmt17_dir
    )
    missing = [s for s in args.split if s not in data]
    if missing:
        raise UsageError(f"split(s) {missing} not in the dataset; it has {sorted(data)}")
    num_beams = args.num_beams or model.generation_config.num_beams or 1

    results = {}
    for split in args.split:
        scores = evaluate_translation(
            model,
            tokenizer,
            take_subset(data[split], args.max_samples),
            source_lang=args.source_lang,
            target_lang=args.target_lang,
            max_source_length=args.max_source_length,
            max_target_length=args.max_target_length,
            batch_size=args.batch_size,
            num_beams=num_beams,
            bf16=args.bf16,
            desc=split,
        )
        hypotheses = scores.pop("hypotheses")
        if args.hypotheses:
            path = Path(args.hypotheses)
            if len(args.split) > 1:
                path = path.with_name(f"{path.stem}.{split}{path.suffix}")
            lines = "".join(h.replace("\n", " ") + "\n" for h in hypotheses)
            write_file(path, lambda target, lines=lines: target.write_text(lines, encoding="utf-8"))
        results[split] = scores
        if args.format == "table":
            print(format_scores(scores, title=f"{args.model_dir} — {split} ({scores['segments']} segments)"))

    others = [s for s in data if s not in args.split and s != "train"]
    if others and args.format == "table":
        # the default scores the in-domain test split only; say how to score the rest
        print(f"also available: --split {' '.join(args.split + others)} (--max-samples N scores a fixed subset)")
    payload = {"model": str(args.model_dir), "dataset": dataset, **results}
    text = json.dumps(payload, indent=2, ensure_ascii=False)
    if args.format == "json":
        print(text)
    if args.output_json:
        write_file(args.output_json, lambda target: target.write_text(text + "\n", encoding="utf-8"))
    return refuse_non_finite_scores("evaluate", results)
