"""`plldr-hf evaluate` for PLDR-LLM language models (model_type `pldrllm`): perplexity on packed blocks.

Documents are tokenised as in training (no BOS, `[END]` after each) and cut into fixed blocks; the perplexity is
exp of the token-weighted mean cross-entropy over every predicted token. Default data: the embedded Shakespeare
validation plays (`--split validation`, also used for `test`), or the corpus named in the folder's `run_options.json`
(its held-out split, as in training); other `--dataset FILES` are scored whole, every paragraph of local text files
(optionally .gz).
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


def _training_run(model_dir: str) -> dict:
    """The options of the run that trained the model (`run_options.json` beside it), or {} for any other folder."""
    from pathlib import Path

    path = Path(model_dir) / "run_options.json"
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return options if isinstance(options, dict) else {}


def _same_files(a, b) -> bool:
    from pathlib import Path

    return sorted(str(Path(p).expanduser().resolve()) for p in a) == sorted(
        str(Path(p).expanduser().resolve()) for p in b
    )


def documents_to_score(args: argparse.Namespace) -> dict:
    """Split name → (what it is, documents). The corpus the model was trained on (named in its `run_options.json`; the embedded
    Shakespeare for a folder without one) is scored on the split it held out, as in training; any other `--dataset`
    files are scored whole. The label says which, so a score never stands without its data."""
    from pathlib import Path

    from datasets import Dataset

    from plldr_hf.training.corpus import TEXT_FORMATS, file_format, load_text_corpus, read_data_files

    run = _training_run(args.model_dir)
    trained_on = list(run.get("dataset") or [])
    dataset = list(args.dataset or trained_on)
    local = bool(dataset) and dataset != ["shakespeare"]
    if local and not (trained_on and _same_files(dataset, trained_on)):
        missing = [p for p in dataset if not Path(p).expanduser().is_file()]
        if missing:
            raise UsageError(f"--dataset: {', '.join(missing)} is not a file; give local text files to score")
        try:
            for path in dataset:
                file_format(Path(path), TEXT_FORMATS)  # plain text only, optionally compressed
            texts = read_data_files("text", dataset, None, sample_by="paragraph")["text"]
        except ValueError as error:  # another file type, empty, not UTF-8, a damaged .gz: names the file
            raise UsageError(f"--dataset: {error}") from error
        documents = [text.strip() for text in texts if text.strip()]
        if not documents:
            raise UsageError(f"--dataset: no text in {', '.join(dataset)} (empty or blank lines only)")
        return {"files": (f"all of {', '.join(dataset)}", Dataset.from_dict({"text": documents}))}
    if local and any(not Path(p).expanduser().exists() for p in dataset):
        raise UsageError(
            f"the model was trained on {', '.join(dataset)}, which is not found from here; pass --dataset with its path"
        )
    corpus = load_text_corpus(
        dataset or None,
        dataset_config=run.get("dataset_config"),
        text_column=run.get("text_column", "text"),
        max_train_documents=run.get("max_train_documents"),
        seed=run.get("seed", 0),
    )
    origin = ", ".join(dataset) if local else "the embedded Shakespeare corpus"
    splits = {}
    for split in args.split:
        name = "validation" if split == "test" else split
        if name not in corpus:
            raise UsageError(f"split {split!r} not in the corpus; it has {sorted(corpus)}")
        held_out = " (not trained on)" if name == "validation" else ""
        splits[name] = (f"{name} split of {origin}{held_out}", corpus[name])
    return splits


def run(args: argparse.Namespace, config: dict) -> int:
    from plldr_hf.evaluation import perplexity
    from plldr_hf.loading import load_model, load_tokenizer
    from plldr_hf.training.preprocessing import pack_into_blocks

    model = load_model(args.model_dir, model_type="pldrllm")
    tokenizer = load_tokenizer(args.model_dir, model_config=model.config)
    block_size = args.block_size or min(config.get("max_position_embeddings", 1024), 1024)
    splits = documents_to_score(args)
    results = {}
    for name, (data, documents) in splits.items():
        blocks = pack_into_blocks(documents, tokenizer, block_size, max_blocks=args.max_blocks or args.max_samples)
        scores = perplexity(model, tokenizer, blocks, batch_size=args.batch_size)
        results[name] = {**scores, "data": data}
        if args.format == "table":
            print(
                f"{args.model_dir} — {data}: perplexity {scores['perplexity']:.3f} "
                f"(cross-entropy {scores['cross_entropy']:.4f} nats over {scores['tokens']} tokens, "
                f"{scores['blocks']} blocks of {block_size})"
            )
    payload = {"model": str(args.model_dir), **results}
    text = json.dumps(payload, indent=2)
    if args.format == "json":
        print(text)
    if args.output_json:
        write_file(args.output_json, lambda target: target.write_text(text + "\n", encoding="utf-8"))
    return refuse_non_finite_scores("evaluate", results)
