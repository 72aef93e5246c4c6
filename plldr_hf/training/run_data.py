"""A run's data, from the corpus to what the Trainer reads, for both families (one step of each pipeline).

- `prepare_tokenizer_and_data` (PLDR-LLM) → `LanguageModelData`: the corpus (`corpus.load_text_corpus`), the
  tokenizer (given, saved or trained: `tokenizers.train_sentencepiece_tokenizer`), packed blocks or documents
  (`preprocessing`) and the collator;
- `prepare_translation_data` (AGF) → `TranslationData`: the splits (`corpus.load_translation_dataset`), the joint
  tokenizer (`tokenizers.train_joint_tokenizer`) and the tokenised splits (`preprocessing.preprocess_translation`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plldr_hf.training.corpus import load_text_corpus, load_text_stream, load_translation_dataset, take_subset
from plldr_hf.training.options import TrainOptions, TranslationOptions


logger = logging.getLogger(__name__)

__all__ = ["LanguageModelData", "TranslationData", "prepare_tokenizer_and_data", "prepare_translation_data"]


@dataclass
class LanguageModelData:
    """What a PLDR-LLM run trains on: its tokenizer, the training examples (packed blocks or documents), the
    validation blocks and the collator that batches them."""

    tokenizer: Any
    train: Any
    validation: Any
    collator: Any


def prepare_tokenizer_and_data(options: TrainOptions, tokenizer=None, load_saved: bool = False) -> LanguageModelData:
    """The tokenizer, train / validation blocks and collator of a PLDR-LLM run (`TrainOptions`): its corpus
    (`load_text_corpus`, or `load_text_stream` with `streaming`), tokenizer (given, saved or trained:
    `train_sentencepiece_tokenizer`), blocks (`pack_into_blocks`, `split_into_documents` with `padding_free`;
    `pack_stream` with `streaming`) and `training_collator`.

    The tokenizer is `tokenizer` if given (the run's starting point: `options.tokenizer`, or the `init_from`
    model's), else the one saved in `options.output_dir` when resuming or when `load_saved` (the other processes of a
    distributed run, after the main one trained it), else trained on the training split (streaming: on its first
    `tokenizer_sample_documents` documents). Streamed, the training blocks are an `IterableDataset` read as training
    consumes it, and the validation blocks a fixed held-out slice (`max_eval_blocks`, default 256 blocks)."""
    from transformers import AutoTokenizer

    from plldr_hf.training.preprocessing import pack_into_blocks, pack_stream, split_into_documents, training_collator
    from plldr_hf.training.tokenizers import train_sentencepiece_tokenizer

    source = dict(dataset_config=options.dataset_config, text_column=options.text_column)
    if options.streaming:
        train_docs, validation_docs = load_text_stream(options.dataset or None, **source)
        if options.max_train_documents is not None:
            train_docs = train_docs.take(options.max_train_documents)
        tokenizer_docs = [row["text"] for row in train_docs.take(options.tokenizer_sample_documents)]
    else:
        corpus = load_text_corpus(
            options.dataset or None, max_train_documents=options.max_train_documents, seed=options.seed, **source
        )
        train_docs, validation_docs, tokenizer_docs = corpus["train"], corpus["validation"], corpus["train"]
    saved = Path(options.output_dir, "tokenizer.json")
    if tokenizer is None and (options.resume_from_checkpoint or load_saved) and saved.exists():
        tokenizer = AutoTokenizer.from_pretrained(options.output_dir)
    elif tokenizer is None:
        logger.info("training a %d-piece SentencePiece unigram tokenizer", options.vocab_size)
        tokenizer = train_sentencepiece_tokenizer(
            tokenizer_docs, options.vocab_size, model_max_length=options.block_size, seed=options.seed
        )
        if len(tokenizer) < options.vocab_size:
            # SentencePiece stops where the corpus has no more pieces to offer; the model is sized to the result
            logger.warning(
                "the tokenizer has %d pieces, fewer than the %d asked for: the training text is too small for more",
                len(tokenizer),
                options.vocab_size,
            )
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos token (PLDR-LLM separates documents with [END])")
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        # the collator drops pad ids from the labels; with pad = eos the document ends would never be learned
        raise ValueError(
            f"the tokenizer's pad token ({tokenizer.pad_token!r}) must be a token of its own, not None or the eos "
            "token; use a tokenizer with a [PAD] token (the PLDR-LLM tokenizer has one) or train one (no --tokenizer)"
        )
    max_eval_blocks = options.max_eval_blocks
    if options.streaming:
        max_eval_blocks = max_eval_blocks or STREAMED_EVAL_BLOCKS
        validation_docs = streamed_validation_slice(
            validation_docs, tokenizer, options.block_size, max_eval_blocks, options.dataset
        )
        train_blocks = pack_stream(train_docs, tokenizer, options.block_size, padding_free=options.padding_free)
    elif options.padding_free:
        train_blocks = split_into_documents(train_docs, tokenizer, options.block_size, desc="Train documents")
    else:
        train_blocks = pack_into_blocks(train_docs, tokenizer, options.block_size, desc="Packing train")
    eval_blocks = pack_into_blocks(
        validation_docs, tokenizer, options.block_size, max_blocks=max_eval_blocks, desc="Packing validation"
    )
    collator = training_collator(options.padding_free, tokenizer)
    return LanguageModelData(tokenizer, train_blocks, eval_blocks, collator)


# validation blocks of a streamed run when `max_eval_blocks` sets none
STREAMED_EVAL_BLOCKS = 256


def streamed_validation_slice(documents, tokenizer, block_size: int, max_blocks: int, dataset=None):
    """The fixed held-out slice a streamed run scores, read once: the first validation documents that fill
    `max_blocks` blocks (plus one, for what packing drops), as a `Dataset` (column `text`). `plldr-hf evaluate` of a
    streamed run's model reads the same slice."""
    from datasets import Dataset

    texts, tokens = [], 0
    for row in documents:
        texts.append(row["text"])
        tokens += len(tokenizer(row["text"], add_special_tokens=False, verbose=False)["input_ids"]) + 1
        if tokens >= (max_blocks + 1) * block_size:
            break
    if tokens < block_size + 1:
        raise ValueError(
            f"the streamed validation data of {dataset or 'the embedded corpus'} holds {len(texts)} document(s), "
            f"{tokens} tokens: not one block of {block_size}; add a validation* file with more text, or give more "
            "documents (without one, 1 % of them are held out by a hash of their text)"
        )
    return Dataset.from_dict({"text": texts})


@dataclass
class TranslationData:
    """What an AGF translation run trains and is scored on: its joint tokenizer, the model config fields it decides
    (`translation_token_fields`), the raw splits (the references of the test scores) and the tokenised ones (the
    training split without the pairs that do not fit)."""

    tokenizer: Any
    model_fields: dict
    raw: Any
    tokenized: Any


def prepare_translation_data(options: TranslationOptions, tokenizer=None) -> TranslationData:
    """The data of an AGF translation run (`TranslationOptions`, its training arguments too): the splits
    (`load_translation_dataset`, subsets of the sizes asked for), the joint tokenizer (given, saved in the output
    folder by an earlier start of the run, or trained on the training split: `train_joint_tokenizer`, saved by the
    main process) and the tokenised splits (`preprocess_translation`: the training split drops the pairs that do not
    fit, the others are truncated). `tokenizer`: the run's starting point's (`options.tokenizer`, or the
    `init_from` model's), if any."""
    from datasets import DatasetDict
    from transformers import AutoTokenizer

    from plldr_hf.training.preprocessing import preprocess_translation
    from plldr_hf.training.tokenizers import train_joint_tokenizer, translation_token_fields

    dataset = options.dataset[0] if len(options.dataset) == 1 else options.dataset
    source, target = options.source_lang, options.target_lang
    raw = load_translation_dataset(
        dataset, source, target, wmt17_dir=options.wmt17_dir, out_of_domain_test=options.out_of_domain_test
    )
    raw["train"] = take_subset(raw["train"], options.max_train_samples)
    raw["validation"] = take_subset(raw["validation"], options.max_eval_samples)
    for split in raw:
        if split not in ("train", "validation"):
            raw[split] = take_subset(raw[split], options.max_test_samples)
    out = Path(options.output_dir)
    if tokenizer is not None:
        pass
    elif (out / "tokenizer.json").is_file():
        # a resumed or restarted run must keep the vocabulary its checkpoints were trained with
        logger.info("reusing the tokenizer saved in %s", out)
        tokenizer = AutoTokenizer.from_pretrained(str(out))
    else:
        logger.info(
            "training a %s tokenizer with %d tokens on %d pairs",
            options.tokenizer_model,
            options.vocab_size,
            len(raw["train"]),
        )
        tokenizer = train_joint_tokenizer(
            raw["train"],
            options.vocab_size,
            languages=(source, target),
            model=options.tokenizer_model,
            seed=options.seed,
        )
        if options.process_index == 0:
            tokenizer.save_pretrained(str(out))
    model_fields = translation_token_fields(tokenizer)
    tokenized = DatasetDict(
        {
            split: preprocess_translation(
                data,
                tokenizer,
                source,
                target,
                max_source_length=options.max_source_length,
                max_target_length=options.max_target_length,
                drop_long=split == "train",
            )
            for split, data in raw.items()
        }
    )
    logger.info(
        "training on %d of %d pairs (the others exceed %d / %d subwords)",
        len(tokenized["train"]),
        len(raw["train"]),
        options.max_source_length,
        options.max_target_length,
    )
    return TranslationData(tokenizer, model_fields, raw, tokenized)
