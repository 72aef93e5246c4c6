"""`plldr-hf push MODEL_DIR REPO_ID`: publish a saved PLDR-LLM or AGF model to the Hub (`plldr_hf.hub.push_folder`)."""

from plldr_hf_cli.output import add_overwrite_flag, check_output, write_staged


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "push",
        help="publish a saved model (weights, model code, tokenizer, model card) to the Hugging Face Hub",
        description=(
            "Load MODEL_DIR with this package's classes and upload, in one commit, what a user needs to load it with "
            "or without plldr_hf: config.json with auto_map, configuration_*.py / modeling_*.py, model.safetensors, "
            "generation_config.json, the tokenizer, README.md (the model card rendered from the family template) "
            "and, for translation models, pipeline_agf.py (the translation pipeline). A collapsed PLDR-LLM is published collapsed. "
            "Card metadata comes from the options below, MODEL_DIR/model_card.json (ModelCardInfo fields) and the "
            "run files of plldr-hf train (train_report.json, run_options.json, collapse_report.json, "
            "test_results.json / validation_results.json). Endpoint and token: HF_ENDPOINT, HF_TOKEN or "
            "`hf auth login`. Nothing is written into MODEL_DIR."
        ),
    )
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="saved model folder (config.json, weights, tokenizer)")
    parser.add_argument("repo_id", metavar="REPO_ID", help="Hub repository, e.g. user/pldr-llm-110m")
    parser.add_argument("--private", action="store_true", help="create the repository private (if it is new)")
    parser.add_argument("--token", help="Hub token (default: HF_TOKEN or the stored login)")
    parser.add_argument("--revision", help="branch to push to (default: main)")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--commit-message", help="commit message")
    parser.add_argument(
        "--card-info", metavar="FILE", help="JSON file of ModelCardInfo fields (wins over MODEL_DIR/model_card.json)"
    )
    parser.add_argument(
        "--metric",
        action="append",
        default=[],
        type=_metric,
        metavar="NAME=VALUE",
        help="a measured metric for the card and model-index, e.g. perplexity=31.2, order_parameter=2e-4, bleu=27.1, "
        "chrf=55, accuracy=0.61 (repeatable)",
    )
    parser.add_argument("--eval-dataset", help="Hub id / type of the evaluation data (model-index dataset.type)")
    parser.add_argument("--eval-split", help="evaluation split (default: test, or what the run files say)")
    parser.add_argument("--dataset", action="append", default=[], help="training dataset id (repeatable)")
    parser.add_argument("--language", action="append", default=[], help="language code (repeatable)")
    parser.add_argument("--license", help="license id (default: apache-2.0)")
    parser.add_argument("--base-model", help="the model this one was fine-tuned from")
    parser.add_argument("--tag", action="append", default=[], help="extra Hub tag (repeatable)")
    parser.add_argument(
        "--dry-run",
        metavar="OUT_DIR",
        help="write the repo contents to OUT_DIR instead of uploading (OUT_DIR must differ from MODEL_DIR)",
    )
    add_overwrite_flag(parser, "--dry-run OUT_DIR")
    parser.set_defaults(func=run)


def _metric(item: str) -> tuple[str, float]:
    """One `--metric NAME=NUMBER`, converted while parsing so a mistake is a usage error before anything loads."""
    import argparse
    import math

    name, sep, value = item.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = None
    if not sep or not name.strip() or number is None or not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"--metric expects NAME=NUMBER (a finite number), got {item!r}")
    return name.strip(), number


def run(args) -> int:
    import json
    import sys
    from pathlib import Path

    from plldr_hf.hub import HubPushError, ModelCardInfo, card_info_from_folder, prepare_folder, push_folder
    from plldr_hf.loading import load_folder

    def fail(message: str, code: int) -> int:
        print(f"plldr-hf push: error: {message}", file=sys.stderr)
        return code

    try:
        overrides = {}
        if args.card_info:
            try:
                overrides = json.loads(Path(args.card_info).read_text(encoding="utf-8"))
            except RecursionError:
                raise ValueError(f"--card-info {args.card_info}: JSON nested too deeply; give a flat object") from None
            if not isinstance(overrides, dict):
                raise ValueError(f"--card-info {args.card_info}: expected a JSON object of ModelCardInfo fields")
        metrics = dict(args.metric)
        if metrics:
            overrides["metrics"] = {**overrides.get("metrics", {}), **metrics}
        options = {
            "eval_dataset": args.eval_dataset,
            "eval_split": args.eval_split,
            "datasets": args.dataset or None,
            "language": args.language or None,
            "license": args.license,
            "base_model": args.base_model,
            "tags": args.tag or None,
        }
        overrides.update({k: v for k, v in options.items() if v is not None})
        ModelCardInfo.from_dict(overrides)  # reject unknown fields before loading the model
    except (OSError, ValueError, TypeError) as error:
        return fail(str(error), 2)

    if args.dry_run:
        out = Path(args.dry_run)
        if out.resolve() == Path(args.model_dir).resolve():
            return fail("--dry-run OUT_DIR must differ from MODEL_DIR", 2)
        refused = check_output("push", out, overwrite=args.overwrite)
        if refused:
            return refused
        try:
            model, tokenizer = load_folder(args.model_dir)
            info = card_info_from_folder(args.model_dir, overrides)
        except (OSError, ValueError) as error:
            return fail(str(error), 2)
        files = []

        def write(staging) -> None:
            files.extend(prepare_folder(model, staging, tokenizer=tokenizer, card=info, repo_id=args.repo_id))

        status = write_staged("push", out, write, overwrite=args.overwrite)
        if status:
            return status
        print(f"wrote {len(files)} files for {args.repo_id} to {out}: {', '.join(files)}")
        return 0

    try:
        commit = push_folder(
            args.model_dir,
            args.repo_id,
            card=overrides,
            private=True if args.private else None,
            token=args.token,
            revision=args.revision,
            commit_message=args.commit_message,
            create_pr=args.create_pr,
        )
    except HubPushError as error:
        usage = error.step == "reading the model folder" and type(error.cause).__name__ != "WeightsMismatchError"
        return fail(str(error), 2 if usage else 1)
    print(f"pushed {args.model_dir} to {args.repo_id}: {getattr(commit, 'commit_url', commit)}")
    return 0
