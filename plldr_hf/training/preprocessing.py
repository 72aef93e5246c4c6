"""Documents → model inputs, for both families (the `datasets.map` steps between a corpus and a Trainer).

- `pack_into_blocks` (PLDR-LLM) — no BOS, `[END]` after every document, documents concatenated and cut into fixed
  blocks (the model predicts tokens 1..n−1 of each block from the tokens before them, as the reference does).
- `split_into_documents` (PLDR-LLM, padding-free batches) — one example per document, long ones cut into blocks.
- `preprocess_translation` (AGF) — sources into `input_ids`, targets into `labels` (unshifted; the model's
  `prepare_decoder_input_ids_from_labels` / `DataCollatorForSeq2Seq` build the decoder inputs).
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict


__all__ = ["pack_into_blocks", "pack_stream", "preprocess_translation", "split_into_documents", "training_collator"]


def _document_tokenizer(tokenizer, block_size: int):
    """The `datasets.map` function shared by both layouts: each document's ids (no BOS) with `[END]` appended."""
    if block_size < 2:
        raise ValueError(f"block_size must be at least 2 (one input and one target), got {block_size}")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos token; PLDR-LLM ends every document with it")

    def tokenize(batch):
        # whole documents, longer than the model: `verbose=False` silences the max-length warning
        ids = tokenizer(batch["text"], add_special_tokens=False, verbose=False)["input_ids"]
        return {"ids": [x + [eos] for x in ids]}

    return tokenize


def _block_cutter(block_size: int):
    """The `datasets.map` function that joins a batch of tokenised documents and cuts it into whole blocks (the
    tokens after the last whole block of the batch are dropped)."""

    def group(batch):
        flat = list(chain.from_iterable(batch["ids"]))
        usable = len(flat) // block_size * block_size
        return {"input_ids": [flat[i : i + block_size] for i in range(0, usable, block_size)]}

    return group


def pack_stream(stream, tokenizer, block_size: int, *, documents_per_batch: int = 1000, padding_free: bool = False):
    """Streamed documents (`datasets.IterableDataset`, column `text`) → model inputs as they arrive: the layout of
    `pack_into_blocks` (documents joined by `[END]`, cut into blocks of `block_size`) within each batch of
    `documents_per_batch` documents, less than one block dropped per batch; or, `padding_free`, one example per
    document as `split_into_documents`. Lazy: nothing is read until the stream is iterated, and the shards of the
    stream stay shards (each process of a distributed run reads its own)."""
    tokenize = _document_tokenizer(tokenizer, block_size)
    if padding_free:

        def pieces(batch):
            docs = tokenize(batch)["ids"]
            return {
                "input_ids": [
                    d[i : i + block_size] for d in docs for i in range(0, len(d), block_size) if len(d[i:]) >= 2
                ]
            }

        return stream.map(pieces, batched=True, batch_size=documents_per_batch, remove_columns=["text"])
    group = _block_cutter(block_size)

    def blocks(batch):
        return group(tokenize(batch))

    return stream.map(blocks, batched=True, batch_size=documents_per_batch, remove_columns=["text"])


def pack_into_blocks(
    dataset: Dataset,
    tokenizer,
    block_size: int,
    *,
    max_blocks: int | None = None,
    num_proc: int | None = None,
    desc: str = "Packing",
) -> Dataset:
    """Tokenises documents (no BOS, `[END]` appended), concatenates them and cuts fixed blocks of `block_size`.

    Documents are grouped 10,000 at a time, so less than one block per group is dropped. Returns a dataset with
    one column `input_ids` (lists of `block_size` ids).
    """
    tokenize = _document_tokenizer(tokenizer, block_size)
    group = _block_cutter(block_size)
    tokenized = dataset.map(
        tokenize, batched=True, remove_columns=dataset.column_names, num_proc=num_proc, desc=f"{desc}: tokenising"
    )
    blocks = tokenized.map(
        group, batched=True, batch_size=10_000, remove_columns=["ids"], num_proc=num_proc, desc=f"{desc}: blocks"
    )
    if len(blocks) == 0:
        total = sum(len(x) for x in tokenized["ids"])
        raise ValueError(f"{desc}: {total} tokens are fewer than one block of {block_size}; lower the block size")
    if max_blocks is not None and len(blocks) > max_blocks:
        blocks = blocks.select(range(max_blocks))
    return blocks


def split_into_documents(
    dataset: Dataset, tokenizer, block_size: int, *, max_examples: int | None = None, desc: str = "Documents"
) -> Dataset:
    """Tokenises documents (no BOS, `[END]` appended) into one example per document, longer documents cut into
    pieces of at most `block_size` tokens: the input of padding-free batches (`DataCollatorWithFlattening`), where
    each document keeps its own Gram matrix and attention. Returns a dataset with one column `input_ids`."""
    to_ids = _document_tokenizer(tokenizer, block_size)

    def tokenize(batch):
        pieces = []
        for doc in to_ids(batch)["ids"]:
            pieces += [doc[i : i + block_size] for i in range(0, len(doc), block_size) if len(doc[i:]) >= 2]
        return {"input_ids": pieces}

    examples = dataset.map(tokenize, batched=True, remove_columns=dataset.column_names, desc=f"{desc}: tokenising")
    if len(examples) == 0:
        raise ValueError(f"{desc}: no document has two or more tokens")
    if max_examples is not None and len(examples) > max_examples:
        examples = examples.select(range(max_examples))
    return examples


def preprocess_translation(
    dataset: Dataset | DatasetDict,
    tokenizer,
    source_lang: str = "en",
    target_lang: str = "de",
    *,
    max_source_length: int = 128,
    max_target_length: int = 128,
    drop_long: bool = False,
    num_proc: int | None = None,
    desc: str = "Tokenising",
) -> Dataset | DatasetDict:
    """Tokenises `translation` pairs into `input_ids`, `attention_mask` and `labels` (truncated, `</s>` kept).

    Order is preserved, so row i of the result belongs to row i of `dataset` (the raw references used for BLEU).
    Pad and shift are left to `DataCollatorForSeq2Seq` and the model. The tokenizer keeps no truncation or padding
    state from these calls (a saved `tokenizer.json` would carry it).

    `drop_long=True` removes the pairs whose source or target does not fit the limits instead of truncating them
    (for training: a truncated target still ends in `</s>`, which teaches the model to stop mid-sentence); the row
    order of the kept pairs is preserved.
    """
    if max_source_length < 2 or max_target_length < 2:
        raise ValueError(
            f"max_source_length={max_source_length} and max_target_length={max_target_length} must be >= 2"
        )

    # one subword over the limit marks a pair as too long (truncation keeps `</s>`, so it is still one too many)
    extra = 1 if drop_long else 0

    def tokenize(batch):
        sources = [pair[source_lang] for pair in batch["translation"]]
        targets = [pair[target_lang] for pair in batch["translation"]]
        encoded = tokenizer(sources, max_length=max_source_length + extra, truncation=True)
        labels = tokenizer(text_target=targets, max_length=max_target_length + extra, truncation=True)["input_ids"]
        encoded["labels"] = labels
        return encoded

    def fits(example):
        return len(example["input_ids"]) <= max_source_length and len(example["labels"]) <= max_target_length

    columns = dataset.column_names
    if isinstance(columns, dict):
        columns = next(iter(columns.values()))
    if "translation" not in columns:
        raise ValueError(f"expected a 'translation' column, found {columns}")
    tokenized = dataset.map(tokenize, batched=True, remove_columns=columns, num_proc=num_proc, desc=desc)
    _reset_call_state(tokenizer)
    return tokenized.filter(fits, num_proc=num_proc, desc="Dropping long pairs") if drop_long else tokenized


def _reset_call_state(tokenizer) -> None:
    """A fast tokenizer keeps the truncation and padding of its last call in its backend (and writes them into
    `tokenizer.json`): whether preprocessing ran or came from the datasets cache would change the saved file, and
    the plain `tokenizers` library would then truncate every text. The tokenizer is left as it was found."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        backend.no_truncation()
        backend.no_padding()


def training_collator(padding_free: bool, tokenizer=None):
    """Fixed packed blocks stacked as they are (transformers' `DataCollatorForLanguageModeling(mlm=False)`: labels
    = inputs, the model shifts them), or (`padding_free`) one document per example concatenated into one row with
    restarting `position_ids` (`DataCollatorWithFlattening`): no padding at all, and the model keeps the documents
    apart (their own Gram matrix and attention)."""
    from transformers import DataCollatorForLanguageModeling, DataCollatorWithFlattening

    if padding_free:
        return DataCollatorWithFlattening(return_tensors="pt")
    if tokenizer is None:
        raise ValueError("training_collator: packed blocks need the tokenizer (its pad id marks no label)")
    return DataCollatorForLanguageModeling(tokenizer, mlm=False, return_tensors="pt")
