"""`plldr-hf evaluate` for PLDR-LLM language models (model_type `pldrllm`): perplexity on packed blocks.

Documents are tokenised as in training (no BOS, `[END]` after each) and cut into fixed blocks; the perplexity is
exp of the token-weighted mean cross-entropy over every predicted token. Default data: the embedded Shakespeare
validation plays (`--split validation`, also used for `test`), or the data named in the folder's `run_options.json`,
resolved as training resolved it (its held-out split, or a streamed run's validation slice); other `--dataset` files,
folders or globs in any format `train` reads are scored whole.
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


def _exists(spec: str) -> bool:
    """Whether a `--dataset` entry names local data: an existing path, or a glob that matches a file."""
    import glob
    from pathlib import Path

    expanded = str(Path(spec).expanduser())
    return bool(glob.glob(expanded)) if glob.has_magic(expanded) else Path(expanded).exists()


def trained_data(run: dict) -> list[str]:
    """The run's `--dataset` entries as training resolved them: a relative path or glob not found from here is read
    against the working directory the run was started in (recorded in `run_options.json`)."""
    from pathlib import Path

    where = run.get("working_directory")
    resolved = []
    for spec in run.get("dataset") or []:
        if (
            where
            and not _exists(spec)
            and not Path(spec).expanduser().is_absolute()
            and _exists(str(Path(where) / spec))
        ):
            spec = str(Path(where) / spec)
        resolved.append(spec)
    return resolved


def _same_data(a, b) -> bool:
    from pathlib import Path

    from plldr_hf.training.corpus import expand_globs

    def files(specs):
        return sorted(str(Path(p).expanduser().resolve()) for p in expand_globs(list(specs)))

    return files(a) == files(b)


def documents_to_score(args: argparse.Namespace) -> dict:
    """Split name → (what it is, documents). The data the model was trained on (named in its `run_options.json`,
    resolved as training resolved it; the embedded Shakespeare for a folder without one) is scored on the split it
    held out, as in training: the held-out share of an in-memory run, the validation slice of a streamed one. Other
    `--dataset` files (any format `train` reads) are scored whole. The label says which, so a score never stands
    without its data."""
    from plldr_hf.training.corpus import load_text_corpus, read_documents

    run = _training_run(args.model_dir)
    trained_on = trained_data(run)
    text_column = run.get("text_column", "text")
    given = list(args.dataset or [])
    if (
        given
        and given != ["shakespeare"]
        and not (trained_on and all(map(_exists, given)) and _same_data(given, trained_on))
    ):
        try:
            documents = read_documents(given, text_column)
        except (ValueError, FileNotFoundError) as error:  # a damaged or foreign file: named
            raise UsageError(f"--dataset: {error}") from error
        if len(documents) == 0:
            raise UsageError(f"--dataset: no text in {', '.join(given)} (empty or blank lines only)")
        return {"files": (f"all of {', '.join(given)}", documents)}
    dataset = given or trained_on
    local = bool(dataset) and dataset != ["shakespeare"]
    if local and not all(map(_exists, dataset)):
        started = (
            f" (nor from {run['working_directory']}, where it was trained)" if run.get("working_directory") else ""
        )
        raise UsageError(
            f"the model was trained on {', '.join(dataset)}, which is not found from here{started}; pass --dataset "
            "with its path"
        )
    origin = ", ".join(dataset) if local else "the embedded Shakespeare corpus"
    if run.get("streaming"):
        return _streamed_validation(args, run, dataset or None, origin)
    corpus = load_text_corpus(
        dataset or None,
        dataset_config=run.get("dataset_config"),
        text_column=text_column,
        max_train_documents=run.get("max_train_documents"),
        seed=run.get("seed", 0),
    )
    splits = {}
    for split in args.split:
        name = "validation" if split == "test" else split
        if name not in corpus:
            raise UsageError(f"split {split!r} not in the corpus; it has {sorted(corpus)}")
        held_out = " (not trained on)" if name == "validation" else ""
        splits[name] = (f"{name} split of {origin}{held_out}", corpus[name])
    return splits


def _streamed_validation(args, run: dict, dataset, origin: str) -> dict:
    """The validation slice a streamed run scored while training (`corpus.streamed_validation_slice`)."""
    from plldr_hf.loading import load_tokenizer
    from plldr_hf.training.corpus import STREAMED_EVAL_BLOCKS, load_text_stream, streamed_validation_slice

    if any(split not in ("validation", "test") for split in args.split):
        raise UsageError("a streamed run holds out one validation slice; use --split validation")
    _, validation = load_text_stream(
        dataset, dataset_config=run.get("dataset_config"), text_column=run.get("text_column", "text")
    )
    tokenizer = load_tokenizer(args.model_dir)
    blocks = run.get("max_eval_blocks") or STREAMED_EVAL_BLOCKS
    documents = streamed_validation_slice(validation, tokenizer, run.get("block_size") or 1024, blocks, dataset)
    return {"validation": (f"validation slice of {origin} (streamed, not trained on)", documents)}


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
