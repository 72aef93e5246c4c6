"""`plldr-hf translate MODEL_DIR "text" ...`: translate sentences with a saved translation model (model_type `agf`)."""

import argparse
import sys

from plldr_hf_cli.arguments import UsageError, positive_int


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "translate",
        help="translate text with a saved translation model",
        description="Translate each TEXT argument (or each line of standard input) and print one line per input.",
    )
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="folder written by plldr-hf train agf")
    parser.add_argument("texts", metavar="TEXT", nargs="*", help="source sentences; none or '-': read stdin")
    parser.add_argument("--num-beams", type=positive_int, help="beam size [the model's generation config]")
    parser.add_argument("--max-new-tokens", type=positive_int, default=256, help="[%(default)s]")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="[%(default)s]")
    parser.set_defaults(func=run, extra_positionals="texts")


def _stdin_lines() -> list[str]:
    """Lines of standard input decoded as UTF-8 whatever the locale (a C locale would hand the tokenizer lone
    surrogates), with the first undecodable line named."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # replaced by a text stream (tests, notebooks): already decoded
        return [line.rstrip("\n") for line in sys.stdin]
    lines = []
    for number, raw in enumerate(stream, start=1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as error:
            raise UsageError(
                f"standard input line {number} is not UTF-8 (byte {error.start}: {error.reason}); convert the text to "
                "UTF-8, e.g. with iconv -f latin1 -t utf-8"
            ) from None
    return lines


def run(args: argparse.Namespace) -> int:
    import torch

    from plldr_hf import AgfTranslationPipeline
    from plldr_hf.loading import load_model, load_tokenizer, read_config

    config = read_config(args.model_dir)  # one line naming the folder when it is missing or not a model
    if config.get("model_type") != "agf":
        raise UsageError(
            f"{args.model_dir} holds model_type {config.get('model_type')!r}; translation needs an agf model"
        )
    texts = args.texts
    if not texts or texts == ["-"]:
        texts = _stdin_lines()
    if not texts:
        raise UsageError("nothing to translate (no TEXT arguments and empty standard input)")
    model = load_model(args.model_dir, model_type="agf")
    tokenizer = load_tokenizer(args.model_dir, model_config=model.config)
    translator = AgfTranslationPipeline(
        model=model, tokenizer=tokenizer, device=0 if torch.cuda.is_available() else -1
    )
    num_beams = args.num_beams or model.generation_config.num_beams or 1
    outputs = translator(
        texts, batch_size=args.batch_size, num_beams=num_beams, max_new_tokens=args.max_new_tokens, truncation=True
    )
    for output in outputs:
        print(output[0]["translation_text"])
    return 0
