"""`plldr-hf lm-eval-task OUT_DIR`: write the offline multiple-choice lm-evaluation-harness task."""

from plldr_hf_cli.arguments import bounded_int, non_negative_int
from plldr_hf_cli.output import add_overwrite_flag, check_output, write_staged


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "lm-eval-task",
        help="write an lm-evaluation-harness task: offline line continuations, or the papers' zero-shot suite",
        description=(
            "--suite continuation (default): write plldr_continuation.yaml and its data into OUT_DIR: each question "
            "is the first half of a line of the validation texts, the choices its true second half and three "
            "others; run it with lm_eval --include_path OUT_DIR --tasks plldr_continuation. --suite papers: write "
            "the task group pldrllm_zeroshot (ARC-easy, ARC-challenge, HellaSwag, WinoGrande, TruthfulQA mc2, "
            "OpenBookQA, PIQA, SocialIQA, zero-shot, lm-eval's own task definitions); run it with lm_eval "
            "--include_path OUT_DIR --tasks pldrllm_zeroshot."
        ),
    )
    parser.add_argument(
        "--suite", choices=("continuation", "papers"), default="continuation", help="which task [%(default)s]"
    )
    parser.add_argument("output_dir", metavar="OUT_DIR", help="folder for the task YAML and its data")
    parser.add_argument(
        "--dataset", nargs="+", help="text files or a dataset name, as for plldr-hf train [the embedded Shakespeare]"
    )
    parser.add_argument("--num-questions", type=bounded_int(1, 100_000), default=200, help="[%(default)s]")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="[%(default)s]")
    add_overwrite_flag(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    import sys

    refused = check_output("lm-eval-task", args.output_dir, overwrite=args.overwrite)
    if refused:
        return refused
    from plldr_hf.models.pldrllm.lm_eval_task import write_continuation_task, write_papers_suite
    from plldr_hf.training.corpus import load_text_corpus

    if args.suite == "papers":
        if args.dataset:
            print("plldr-hf lm-eval-task: error: --dataset applies to --suite continuation; drop it", file=sys.stderr)
            return 2
        names = []
        status = write_staged(
            "lm-eval-task",
            args.output_dir,
            lambda staging: names.append(write_papers_suite(staging)),
            overwrite=args.overwrite,
        )
        if not status:
            print(f"wrote task group {names[0]} to {args.output_dir}")
        return status
    try:
        documents = load_text_corpus(args.dataset)["validation"]["text"]
    except (OSError, ValueError) as error:
        print(f"plldr-hf lm-eval-task: error: {error}", file=sys.stderr)
        return 2
    names = []
    status = write_staged(
        "lm-eval-task",
        args.output_dir,
        lambda staging: names.append(write_continuation_task(staging, documents, args.num_questions, args.seed)),
        overwrite=args.overwrite,
    )
    if status:
        return status
    print(f"wrote task {names[0]} to {args.output_dir}")
    return 0
