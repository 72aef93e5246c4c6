"""`plldr-hf evaluate` for PLDR-LLM language models (model_type `pldrllm`): perplexity on packed blocks.

Documents are tokenised as in training (no BOS, `[END]` after each) and cut into fixed blocks; the perplexity is
exp of the token-weighted mean cross-entropy over every predicted token. Default data: the embedded Shakespeare
validation plays (`--split validation`, also used for `test`); `--dataset FILES` scores every paragraph of local
text files (optionally .gz).
"""

import argparse
import json

from plldr_hf_cli.arguments import UsageError, positive_int, refuse_non_finite_scores
from plldr_hf_cli.output import write_file


MODEL_TYPES = ("pldrllm",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("language models (pldrllm)")
    group.add_argument(
        "--block-size", type=positive_int, help="tokens per scored block [the model's context, at most 1024]"
    )
    group.add_argument("--max-blocks", type=positive_int, help="score at most this many blocks")


def _read_text(path: str) -> str:
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            return handle.read()
    except OSError as err:
        raise UsageError(f"cannot read text file {path}: {err}") from err


def run(args: argparse.Namespace, config: dict) -> int:
    from datasets import Dataset

    from plldr_hf.loading import load_model, load_tokenizer
    from plldr_hf.models import FAMILIES
    from plldr_hf.training.corpus import load_text_corpus
    from plldr_hf.training.preprocessing import pack_into_blocks

    model, tokenizer = load_model(args.model_dir, model_type="pldrllm"), load_tokenizer(args.model_dir)
    block_size = args.block_size or min(config.get("max_position_embeddings", 1024), 1024)
    if args.dataset and args.dataset != ["shakespeare"]:
        # local text files: every paragraph (blank-line separated) of every file is one document
        documents = [doc.strip() for path in args.dataset for doc in _read_text(path).split("\n\n") if doc.strip()]
        splits = {"files": Dataset.from_dict({"text": documents})}
    else:
        corpus = load_text_corpus(None)
        splits = {}
        for split in args.split:
            name = "validation" if split == "test" else split
            if name not in corpus:
                raise UsageError(f"split {split!r} not in the corpus; it has {sorted(corpus)}")
            splits[name] = corpus[name]
    results = {}
    for name, documents in splits.items():
        blocks = pack_into_blocks(documents, tokenizer, block_size, max_blocks=args.max_blocks or args.max_samples)
        # the family's evaluation entry point: plldr_hf.evaluation.perplexity
        scores = FAMILIES["pldrllm"].entry_point("evaluate")(model, blocks, batch_size=args.batch_size)
        results[name] = scores
        if args.format == "table":
            print(
                f"{args.model_dir} — {name}: perplexity {scores['perplexity']:.3f} "
                f"(cross-entropy {scores['cross_entropy']:.4f} nats over {scores['tokens']} tokens, "
                f"{scores['blocks']} blocks of {block_size})"
            )
    payload = {"model": str(args.model_dir), "dataset": args.dataset or ["shakespeare"], **results}
    text = json.dumps(payload, indent=2)
    if args.format == "json":
        print(text)
    if args.output_json:
        write_file(args.output_json, lambda target: target.write_text(text + "\n", encoding="utf-8"))
    return refuse_non_finite_scores("evaluate", results)
