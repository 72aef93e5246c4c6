"""Causal-LM training pipeline for PLDR-LLM: corpus → tokenizer → packed blocks → Trainer → report.

Pieces (each usable alone):

- `load_text_corpus` — documents as a `DatasetDict` (`train`, `validation`; column `text`): the embedded
  Shakespeare corpus (default, offline), local text / JSON / Parquet / CSV files, or any Hugging Face dataset.
- `train_sentencepiece_tokenizer` — a SentencePiece unigram model with byte fallback and the released special ids
  (`[PAD]` 0, `[UNK]` 1, `[START]` 2, `[END]` 3, `[SEP]` 4, `[CLS]` 5, bytes from 6; `pldr_llm.md` §6), returned
  as a `PreTrainedTokenizerFast` that encodes exactly like SentencePiece.
- `pack_into_blocks` — no BOS, `[END]` after every document, documents concatenated and cut into fixed blocks
  (the model predicts tokens 1..n−1 of each block from the tokens before them, as the reference does).
- `pldrllm_config` (named sizes `tiny`, `small`, `110m`), `llama_config_like` (the baseline of the same width and
  depth), `reference_training_arguments` (the reference recipe: AdamW (0.9, 0.95), eps 1e-5, weight decay 0.1 on
  every parameter, clipping by value 1.0, linear warm-up then cosine to 10 % of the peak through the stock
  `cosine_with_min_lr` scheduler, bf16 where the GPU supports it).
- `order_parameters` — the SOC order parameter of A, A_LM, A_P, G_LM (`plldr_hf.diagnostics.diagnose`) on
  validation prompts.
- `train_causal_lm` — the whole run with checkpointing and resume; at the end validation perplexity, the order
  parameter before and after training, `loss_curves.png` and `train_report.json` in the output folder.

The CLI (`plldr-hf train pldrllm`, whose flags live in `plldr_hf_cli/commands/train/pldrllm.py`) and
`examples/train_pldr_llm.py` call `run_from_args`.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

from plldr_hf.models.pldrllm.tokenization_pldrllm import SPECIAL_PIECES, PldrllmTokenizer


if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict


logger = logging.getLogger(__name__)

__all__ = [
    "SIZES",
    "TrainOptions",
    "load_text_corpus",
    "train_sentencepiece_tokenizer",
    "pack_into_blocks",
    "CausalLMCollator",
    "check_checkpoint",
    "split_into_documents",
    "training_collator",
    "pldrllm_config",
    "llama_config_like",
    "reference_training_arguments",
    "order_parameters",
    "plot_loss_curves",
    "perplexity_from_metrics",
    "train_causal_lm",
    "run_from_args",
]

# named model sizes: config fields plus training defaults (block length, per-device batch, tokenizer vocabulary)
SIZES = {
    # seconds on a CPU; for smoke tests and examples
    "tiny": {
        "model": dict(
            hidden_size=64,
            num_attention_heads=4,
            head_dim=16,
            num_hidden_layers=2,
            intermediate_size=170,
            A_dff=42,
            num_reslayerA=2,
            num_denseA=2,
        ),
        "block_size": 64,
        "batch_size": 8,
        "vocab_size": 1024,
        "learning_rate": 1e-3,
    },
    # minutes on a CPU (the quickstart): 2 layers, 4 heads × 32, a 4-unit metric learner of 32→85→32 GLUs
    "mini": {
        "model": dict(
            hidden_size=128,
            num_attention_heads=4,
            head_dim=32,
            num_hidden_layers=2,
            intermediate_size=341,
            A_dff=85,
            num_reslayerA=4,
            num_denseA=2,
        ),
        "block_size": 128,
        "batch_size": 8,
        "vocab_size": 2048,
        "learning_rate": 1e-3,
    },
    # the released per-head PLGA (d = 64, 8 residual units of 64→170→64 GLUs) in a 4-layer, 256-wide model;
    # about 5 s per step on a 2-core CPU (a Llama of the same shape: about 1.5 s)
    "small": {
        "model": dict(
            hidden_size=256,
            num_attention_heads=4,
            head_dim=64,
            num_hidden_layers=4,
            intermediate_size=682,
            A_dff=170,
            num_reslayerA=8,
            num_denseA=2,
        ),
        "block_size": 256,
        "batch_size": 4,
        "vocab_size": 4096,
        "learning_rate": 1e-3,
    },
    # the released 110M v51 architecture (pldr_llm.md §4.1); vocabulary from the tokenizer
    "110m": {
        "model": dict(
            hidden_size=896,
            num_attention_heads=14,
            head_dim=64,
            num_hidden_layers=5,
            intermediate_size=2389,
            A_dff=170,
            num_reslayerA=8,
            num_denseA=2,
        ),
        "block_size": 1024,
        "batch_size": 16,
        "vocab_size": 32000,
        "learning_rate": 1e-3,
    },
}

USER_PIECES = ("[SEP]", "[CLS]")

_TEXT_SUFFIXES = {".txt", ".text", ".md"}
_TABLE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
_COMPRESSION = (".gz", ".bz2", ".xz", ".zst")
_SPLIT_NAMES = {
    "train": "train",
    "validation": "validation",
    "valid": "validation",
    "dev": "validation",
    "test": "test",
}


def _embedded_shakespeare() -> dict[str, list[str]]:
    from plldr_hf.training.data import embedded_data_path

    return {split: [str(embedded_data_path("en_shakespeare", f"{split}.txt.gz"))] for split in ("train", "validation")}


def _file_kind(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSION:
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last in _TEXT_SUFFIXES:
        return "text"
    if last in _TABLE_FORMATS:
        return _TABLE_FORMATS[last]
    raise ValueError(
        f"cannot read {path}: unsupported file type {''.join(path.suffixes) or '(none)'}; use plain text "
        f"(.txt, .md, optionally .gz), .json / .jsonl, .parquet or .csv"
    )


def _split_of(path: Path) -> str | None:
    stem = path.name.split(".")[0].lower()
    for prefix, split in _SPLIT_NAMES.items():
        if stem == prefix or stem.startswith((prefix + "_", prefix + "-")):
            return split
    return None


def _local_files(specs: Sequence[str]) -> dict[str, list[Path]]:
    files: dict[str, list[Path]] = {}
    for spec in specs:
        path = Path(spec).expanduser()
        if path.is_dir():
            found = []
            for candidate in sorted(p for p in path.iterdir() if p.is_file()):
                try:
                    _file_kind(candidate)
                except ValueError:
                    continue
                found.append(candidate)
            if not found:
                raise FileNotFoundError(f"no text, JSON, Parquet or CSV files in directory {path}")
        else:
            _file_kind(path)
            found = [path]
        for p in found:
            files.setdefault(_split_of(p) or "train", []).append(p)
    return files


def load_text_corpus(
    dataset: str | Sequence[str] | None = None,
    *,
    dataset_config: str | None = None,
    text_column: str = "text",
    validation_fraction: float = 0.05,
    max_train_documents: int | None = None,
    seed: int = 0,
    cache_dir: str | None = None,
) -> DatasetDict:
    """Loads a text corpus as documents: a `DatasetDict` with splits `train` and `validation`, column `text`.

    Args:
        dataset: `None` or `"shakespeare"` for the embedded Shakespeare corpus (offline; validation = *Julius
            Caesar* and *Twelfth Night*); paths to local files or folders (plain text `.txt` / `.md`, optionally
            `.gz`, where documents are paragraphs separated by blank lines; `.json`, `.jsonl`, `.parquet`, `.csv`
            with a text column); or the name of a Hugging Face dataset (needs the network or a cache). A file whose
            name starts with `validation` / `valid` / `dev` is the validation split, `test*` is ignored, anything
            else is training text.
        dataset_config: configuration name of a Hugging Face dataset.
        text_column: column holding the text in table files and Hub datasets.
        validation_fraction: share of training documents held out when there is no validation split.
        max_train_documents: keep only the first this many training documents.
        seed: seed of the held-out selection.
        cache_dir: `datasets` cache folder.

    Example:
        >>> corpus = load_text_corpus()
        >>> sorted(corpus), corpus["validation"][0]["text"]
        (['train', 'validation'], 'JULIUS CAESAR')
    """
    from datasets import DatasetDict, load_dataset

    specs = [dataset] if isinstance(dataset, str) else list(dataset or [])
    if not specs or (len(specs) == 1 and specs[0].lower() == "shakespeare" and not Path(specs[0]).exists()):
        raw = load_dataset("text", data_files=_embedded_shakespeare(), sample_by="paragraph", cache_dir=cache_dir)
        origin = "the embedded Shakespeare corpus"
    elif all(Path(s).expanduser().exists() for s in specs):
        files = _local_files(specs)
        files.pop("test", None)
        if "train" not in files:
            raise ValueError(f"no training files among {specs} (files named test* / validation* are not training)")
        splits = {}
        for split, paths in files.items():
            kinds = {_file_kind(p) for p in paths}
            if len(kinds) > 1:
                raise ValueError(f"split {split!r} mixes file types {sorted(kinds)}: {[str(p) for p in paths]}")
            kind = kinds.pop()
            extra = {"sample_by": "paragraph"} if kind == "text" else {}
            splits[split] = load_dataset(
                kind, data_files=[str(p) for p in paths], split="train", cache_dir=cache_dir, **extra
            )
        raw = DatasetDict(splits)
        origin = f"local files {specs}"
    elif len(specs) == 1:
        name = specs[0]
        try:
            raw = load_dataset(name, dataset_config, cache_dir=cache_dir)
        except Exception as err:
            raise RuntimeError(
                f"could not load dataset {name!r} (config {dataset_config!r}): neither an existing local path nor "
                f"a loadable Hugging Face dataset ({type(err).__name__}: {err}). Hub datasets need the network or a "
                f"cached copy; offline, use the embedded corpus (no --dataset) or local files."
            ) from err
        if "train" not in raw:
            raise ValueError(f"dataset {name!r} has no 'train' split (splits: {list(raw)})")
        raw = DatasetDict({k: raw[k] for k in ("train", "validation") if k in raw})
        origin = f"Hugging Face dataset {name!r}"
    else:
        missing = [s for s in specs if not Path(s).expanduser().exists()]
        raise FileNotFoundError(f"dataset files not found: {missing}")

    for split, ds in list(raw.items()):
        if text_column not in ds.column_names:
            raise ValueError(
                f"{origin}, split {split!r}: no text column {text_column!r}; columns are {ds.column_names} "
                f"(choose one with --text-column)"
            )
        ds = ds.select_columns([text_column])
        if text_column != "text":
            ds = ds.rename_column(text_column, "text")
        ds = ds.filter(lambda ex: bool(ex["text"] and ex["text"].strip()), desc=f"Dropping empty {split}")
        raw[split] = ds.map(lambda ex: {"text": ex["text"].strip()}, desc=f"Stripping {split}")
    if max_train_documents is not None:
        raw["train"] = raw["train"].select(range(min(max_train_documents, len(raw["train"]))))
    if "validation" not in raw:
        if not 0.0 < validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
        if len(raw["train"]) < 2:
            raise ValueError(f"{origin} has {len(raw['train'])} training document(s); too few to hold out validation")
        parts = raw["train"].train_test_split(test_size=validation_fraction, seed=seed, shuffle=True)
        raw["train"], raw["validation"] = parts["train"], parts["test"]
        logger.info("held out %d of the training documents as validation", len(parts["test"]))
    for split in ("train", "validation"):
        if len(raw[split]) == 0:
            raise ValueError(f"split {split!r} of {origin} has no non-empty documents")
    return DatasetDict({"train": raw["train"], "validation": raw["validation"]})


def _texts(data, max_documents: int | None) -> Iterable[str]:
    if hasattr(data, "column_names"):
        n = len(data) if max_documents is None else min(max_documents, len(data))
        for start in range(0, n, 1000):
            yield from data[start : min(n, start + 1000)]["text"]
    else:
        for i, text in enumerate(data):
            if max_documents is not None and i >= max_documents:
                break
            if not isinstance(text, str):
                raise TypeError(f"tokenizer training text {i} is {type(text).__name__}, expected str")
            yield text


def train_sentencepiece_tokenizer(
    data: Dataset | Iterable[str],
    vocab_size: int = 4096,
    *,
    max_documents: int | None = 200_000,
    model_max_length: int = 1024,
    num_threads: int | None = None,
    seed: int = 0,
) -> PldrllmTokenizer:
    """Trains a SentencePiece unigram tokenizer with the settings of the released PLDR-LLM tokenizer.

    Unigram, `byte_fallback=True`, `split_digits=True`, `nmt_nfkc` normalisation, dummy prefix, cased; special ids
    `[PAD]` 0, `[UNK]` 1, `[START]` 2, `[END]` 3, user symbols `[SEP]` 4, `[CLS]` 5, byte pieces from 6
    (`pldr_llm.md` §6). The vocabulary is a soft limit: a small corpus gets fewer pieces. The SentencePiece model is
    converted to a `tokenizers` unigram pipeline (precompiled `nmt_nfkc` charsmap, `▁` metaspace, byte fallback),
    so the returned `PreTrainedTokenizerFast` encodes like SentencePiece; the original model is kept in
    `tokenizer.sp_model_proto` and written next to it as `tokenizer.model` by `save_pretrained`.

    Args:
        data: a dataset with a `text` column (lines of each document are the training sentences) or an iterable
            of strings.
        vocab_size: target vocabulary size including the 6 special pieces and 256 byte pieces.
        max_documents: use at most this many documents.
        model_max_length: maximum length recorded in the tokenizer config.
        num_threads: SentencePiece trainer threads (default: up to 4).
        seed: SentencePiece sampling seed.

    Example:
        >>> tok = train_sentencepiece_tokenizer(["To be, or not to be: that is the question."] * 200, vocab_size=300)
        >>> tok.convert_ids_to_tokens([0, 1, 2, 3, 4, 5, 6])
        ['[PAD]', '[UNK]', '[START]', '[END]', '[SEP]', '[CLS]', '<0x00>']
    """
    import sentencepiece as spm

    minimum = len(SPECIAL_PIECES) + len(USER_PIECES) + 256 + 1
    if vocab_size < minimum:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: 6 special and 256 byte pieces need at least {minimum}"
        )

    def sentences():
        for text in _texts(data, max_documents):
            for line in text.splitlines():
                if line.strip():
                    yield line

    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=model,
            model_type="unigram",
            vocab_size=vocab_size,
            hard_vocab_limit=False,
            byte_fallback=True,
            split_digits=True,
            normalization_rule_name="nmt_nfkc",
            add_dummy_prefix=True,
            character_coverage=0.9995,
            pad_id=0,
            unk_id=1,
            bos_id=2,
            eos_id=3,
            pad_piece=SPECIAL_PIECES["pad_token"],
            unk_piece=SPECIAL_PIECES["unk_token"],
            bos_piece=SPECIAL_PIECES["bos_token"],
            eos_piece=SPECIAL_PIECES["eos_token"],
            user_defined_symbols=list(USER_PIECES),
            max_sentence_length=16384,
            num_threads=num_threads or min(4, os.cpu_count() or 1),
            minloglevel=2,
        )
    except RuntimeError as err:
        raise ValueError(f"SentencePiece training failed (is the training text empty or tiny?): {err}") from err
    return tokenizer_from_sentencepiece(model.getvalue(), model_max_length=model_max_length)


def tokenizer_from_sentencepiece(model_proto: bytes, model_max_length: int = 1024) -> PldrllmTokenizer:
    """A `PldrllmTokenizer` from a serialised SentencePiece unigram model (same pieces, same encoding)."""
    return PldrllmTokenizer(sp_model_proto=model_proto, model_max_length=model_max_length)


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

    def group(batch):
        flat = list(chain.from_iterable(batch["ids"]))
        usable = len(flat) // block_size * block_size
        return {"input_ids": [flat[i : i + block_size] for i in range(0, usable, block_size)]}

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


class CausalLMCollator:
    """Stacks equal-length blocks into `input_ids` and `labels` (= `input_ids`; the model shifts them)."""

    def __call__(self, features):
        import torch

        ids = torch.tensor([f["input_ids"] for f in features], dtype=torch.long)
        return {"input_ids": ids, "labels": ids.clone()}


def pldrllm_config(
    size: str,
    vocab_size: int,
    *,
    max_position_embeddings: int | None = None,
    dag_weights: Sequence[float] = (0.0, 0.0, 0.0),
    dag_loss_form: str = "log_ratio",
    **overrides,
):
    """`PldrllmConfig` of a named size (`tiny`, `small`, `110m`) with the vocabulary of the tokenizer.

    Example:
        >>> pldrllm_config("tiny", 1024).hidden_size
        64
    """
    from plldr_hf import PldrllmConfig

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    preset = SIZES[size]
    fields = dict(preset["model"])
    fields.update(
        vocab_size=vocab_size,
        max_position_embeddings=max_position_embeddings or preset["block_size"],
        dag_weight_a_lm=float(dag_weights[0]),
        dag_weight_a_p=float(dag_weights[1]),
        dag_weight_g_lm=float(dag_weights[2]),
        dag_loss_form=dag_loss_form,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    fields.update(overrides)
    return PldrllmConfig(**fields)


def llama_config_like(config):
    """`LlamaConfig` of the same width, depth, heads, FFN width, vocabulary, context and RoPE base as a
    `PldrllmConfig`, with biases on the attention and MLP Linears and an untied LM head (as PLDR-LLM). What differs
    is the architecture itself: pre-RMSNorm layers, plain SDPA attention, no metric learner."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_attention_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=False,
        rms_norm_eps=config.layer_norm_eps,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def _bf16_available() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def reference_training_arguments(
    output_dir: str,
    *,
    max_steps: int,
    learning_rate: float = 1e-3,
    warmup_steps: int | None = None,
    per_device_train_batch_size: int = 16,
    per_device_eval_batch_size: int | None = None,
    gradient_accumulation_steps: int = 1,
    clip_by: str = "value",
    bf16: bool | None = None,
    logging_steps: int = 10,
    eval_steps: int | None = None,
    save_steps: int | None = None,
    save_total_limit: int | None = 2,
    report_to: str | list[str] = "none",
    seed: int = 0,
    **overrides,
):
    """`TrainingArguments` with the reference recipe (`pldr_llm.md` §7.2) as defaults.

    AdamW β = (0.9, 0.95), eps 1e-5, weight decay 0.1 (apply it to every parameter with
    `PldrTrainer(decay_all_parameters=True)`), linear warm-up to `learning_rate` then cosine decay to 10 % of it
    at `max_steps` (the stock `cosine_with_min_lr` scheduler with `min_lr_rate=0.1`), bf16 when the GPU supports
    it. `clip_by="value"` turns Trainer's norm clipping off (`max_grad_norm=0`) for `ClipGradValueCallback(1.0)`;
    `"norm"` clips by norm 1.0. On CPU with several processes (torchrun) DDP uses gloo.

    `warmup_steps=None` takes 10 % of `max_steps`, at most the reference's 2000.
    """
    import torch
    from transformers import TrainingArguments

    if max_steps <= 0:
        raise ValueError(f"max_steps must be positive, got {max_steps}")
    if clip_by not in ("value", "norm"):
        raise ValueError(f"clip_by must be 'value' or 'norm', got {clip_by!r}")
    if warmup_steps is None:
        warmup_steps = min(2000, max(1, max_steps // 10))
    if bf16 is None:
        bf16 = _bf16_available()
    kwargs = dict(
        output_dir=output_dir,
        max_steps=max_steps,
        learning_rate=learning_rate,
        lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": 0.1},
        warmup_steps=int(warmup_steps),
        optim="adamw_torch",
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_epsilon=1e-5,
        weight_decay=0.1,
        max_grad_norm=0.0 if clip_by == "value" else 1.0,
        per_device_train_batch_size=per_device_train_batch_size,
        per_device_eval_batch_size=per_device_eval_batch_size or per_device_train_batch_size,
        gradient_accumulation_steps=gradient_accumulation_steps,
        bf16=bf16,
        logging_steps=logging_steps,
        eval_strategy="steps" if eval_steps else "no",
        eval_steps=eval_steps or None,
        save_strategy="steps",
        save_steps=save_steps or max_steps,
        save_total_limit=save_total_limit,
        report_to=report_to,
        seed=seed,
        data_seed=seed,
        dataloader_drop_last=True,
        dataloader_pin_memory=torch.cuda.is_available(),
    )
    if not torch.cuda.is_available() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # multi-process CPU DDP (torchrun) needs both, otherwise every process trains alone (hf_integration.md §12)
        kwargs.update(use_cpu=True, ddp_backend="gloo")
    kwargs.update(overrides)
    return TrainingArguments(**kwargs)


def order_parameters(model, calibration=None, new_tokens: int = 16) -> dict | None:
    """Order parameters of A, A_LM, A_P, G_LM from `plldr_hf.diagnostics.diagnose` (the model is not changed).

    `"across_inputs"` (the headline number, and what `collapse()` tests): the SOC statistic RMSE(x − x_ref)/|mean
    (x_ref)| between the calibration inputs, x_ref the first one; `"soc"`: the same statistic between each prompt and
    the prompt plus `new_tokens` greedy tokens (`pldr_llm.md` §10.1). `calibration` None: the default calibration of
    `collapse()` and `plldr-hf diagnose` (`default_calibration`), so the three report the same number for one model.
    ≈ 0 means input-invariant (near-critical); order 1 and above, sub-critical. None for models without a learned G
    (the Llama baseline, a fixed-G or collapsed PLDR-LLM).
    """
    from plldr_hf.diagnostics import diagnose

    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) != "pldrllm" or config.custom_G_type is not None or config.collapsed:
        return None
    report = diagnose(model, inputs=calibration, new_tokens=new_tokens)
    return {"across_inputs": dict(report.order_parameter_inputs), "soc": dict(report.order_parameter)}


def seconds_per_step(train_metrics: dict, steps: int) -> float | None:
    """Wall seconds per optimizer step of a run: Trainer's `train_runtime` / steps (evaluation and checkpoints
    included), the one definition every report of the package uses."""
    runtime = train_metrics.get("train_runtime")
    return runtime / steps if runtime and steps else None


def perplexity_from_metrics(metrics: dict, prefix: str = "eval") -> float:
    """exp of the evaluation cross-entropy (`{prefix}_lm_loss` when the DAG term is in `{prefix}_loss`)."""
    loss = metrics.get(f"{prefix}_lm_loss", metrics.get(f"{prefix}_loss"))
    if loss is None:
        raise KeyError(f"no {prefix}_lm_loss or {prefix}_loss in {sorted(metrics)}")
    return math.exp(loss) if loss < 700 else float("inf")


def plot_loss_curves(log_history: list[dict], path: str | os.PathLike, title: str | None = None) -> Path:
    """Writes a PNG of the training loss, cross-entropy, validation loss and DAG components against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(key):
        points = [(entry["step"], entry[key]) for entry in log_history if key in entry and "step" in entry]
        return [p[0] for p in points], [p[1] for p in points]

    dag_keys = [k for k in ("dag_a_lm", "dag_a_p", "dag_g_lm") if series(k)[0]]
    fig, axes = plt.subplots(1, 2 if dag_keys else 1, figsize=(14 if dag_keys else 11, 4.8), squeeze=False)
    ax = axes[0][0]
    for key, label in (
        ("loss", "train loss"),
        ("lm_loss", "train cross-entropy"),
        ("eval_lm_loss", "val cross-entropy"),
    ):
        xs, ys = series(key)
        if xs:
            ax.plot(xs, ys, label=label, marker="o" if key.startswith("eval") else None)
    if not series("eval_lm_loss")[0]:
        xs, ys = series("eval_loss")
        if xs:
            ax.plot(xs, ys, label="val loss", marker="o")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats / token)")
    ax.set_title("training and validation loss")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if dag_keys:
        ax = axes[0][1]
        for key in dag_keys:
            xs, ys = series(key)
            ax.plot(xs, ys, label=key)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("DAG value, unweighted (dimensionless)")
        ax.set_title("DAG regulariser terms")
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


@dataclass
class TrainOptions:
    """Options of `train_causal_lm` (the CLI flags of `plldr-hf train pldrllm`)."""

    size: str = "tiny"
    output_dir: str = "pldrllm-run"
    dataset: list[str] = field(default_factory=list)
    dataset_config: str | None = None
    text_column: str = "text"
    max_train_documents: int | None = None
    tokenizer: str | None = None
    vocab_size: int | None = None
    block_size: int | None = None
    batch_size: int | None = None
    gradient_accumulation_steps: int = 1
    max_steps: int = 100
    learning_rate: float | None = None
    warmup_steps: int | None = None
    clip_by: str = "value"
    bf16: bool | None = None
    dag_weights: tuple[float, float, float] = (0.0, 0.0, 0.0)
    dag_warmup_steps: int = 0
    dag_form: str = "log_ratio"
    log_dag: bool = False
    logging_steps: int = 10
    eval_steps: int | None = None
    save_steps: int | None = None
    save_total_limit: int | None = 2
    max_eval_blocks: int | None = None
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"])
    resume: str | bool | None = None
    seed: int = 0
    architecture: str = "pldrllm"
    padding_free: bool = False

    def resolved(self) -> TrainOptions:
        """Fills the size-dependent defaults (block, batch, vocabulary, learning rate)."""
        if self.size not in SIZES:
            raise ValueError(f"unknown size {self.size!r}; choose one of {sorted(SIZES)}")
        if self.architecture not in ("pldrllm", "llama"):
            raise ValueError(f"architecture must be 'pldrllm' or 'llama', got {self.architecture!r}")
        preset = SIZES[self.size]
        out = copy.copy(self)
        out.block_size = self.block_size or preset["block_size"]
        out.batch_size = self.batch_size or preset["batch_size"]
        out.vocab_size = self.vocab_size or preset["vocab_size"]
        out.learning_rate = self.learning_rate or preset["learning_rate"]
        out.dag_weights = tuple(float(w) for w in self.dag_weights)
        if len(out.dag_weights) != 3 or any(not w >= 0 for w in out.dag_weights):
            raise ValueError(f"dag_weights are three non-negative numbers (A_LM, A_P, G_LM), got {self.dag_weights}")
        if out.architecture == "llama" and any(out.dag_weights):
            raise ValueError("DAG weights apply to PLDR-LLM only; the llama baseline has no deductive outputs")
        return out


def training_collator(options: TrainOptions):
    """Fixed packed blocks stacked as they are, or (`padding_free`) one document per example concatenated into one
    row with restarting `position_ids` (transformers' `DataCollatorWithFlattening`): no padding at all, and the
    model keeps the documents apart (their own Gram matrix and attention)."""
    if options.padding_free:
        from transformers import DataCollatorWithFlattening

        return DataCollatorWithFlattening(return_tensors="pt")
    return CausalLMCollator()


def prepare_tokenizer_and_data(options: TrainOptions, tokenizer=None, load_saved: bool = False):
    """Corpus, tokenizer and packed train / validation blocks.

    The tokenizer is `tokenizer` if given, else loaded from `options.tokenizer`, else the one saved in
    `options.output_dir` when resuming or when `load_saved` (the other processes of a distributed run, after the
    main one trained it), else trained on the training split."""
    from transformers import AutoTokenizer

    corpus = load_text_corpus(
        options.dataset or None,
        dataset_config=options.dataset_config,
        text_column=options.text_column,
        max_train_documents=options.max_train_documents,
        seed=options.seed,
    )
    saved = Path(options.output_dir, "tokenizer.json")
    if tokenizer is None and options.tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(options.tokenizer)
    elif tokenizer is None and (options.resume or load_saved) and saved.exists():
        tokenizer = AutoTokenizer.from_pretrained(options.output_dir)
    elif tokenizer is None:
        logger.info("training a %d-piece SentencePiece unigram tokenizer", options.vocab_size)
        tokenizer = train_sentencepiece_tokenizer(
            corpus["train"], options.vocab_size, model_max_length=options.block_size, seed=options.seed
        )
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos token (PLDR-LLM separates documents with [END])")
    if options.padding_free:
        train_blocks = split_into_documents(corpus["train"], tokenizer, options.block_size, desc="Train documents")
    else:
        train_blocks = pack_into_blocks(corpus["train"], tokenizer, options.block_size, desc="Packing train")
    eval_blocks = pack_into_blocks(
        corpus["validation"],
        tokenizer,
        options.block_size,
        max_blocks=options.max_eval_blocks,
        desc="Packing validation",
    )
    return tokenizer, train_blocks, eval_blocks


def build_model(options: TrainOptions, vocab_size: int):
    """A freshly initialised PLDR-LLM (or the Llama baseline) of `options.size`, seeded by `options.seed`."""
    from transformers import LlamaForCausalLM, set_seed

    from plldr_hf import PldrllmForCausalLM

    config = pldrllm_config(
        options.size,
        vocab_size,
        max_position_embeddings=options.block_size,
        dag_weights=options.dag_weights,
        dag_loss_form=options.dag_form,
    )
    set_seed(options.seed)
    if options.architecture == "llama":
        return LlamaForCausalLM(llama_config_like(config))
    return PldrllmForCausalLM(config)


def check_checkpoint(folder: str | os.PathLike) -> None:
    """Raise `ValueError` naming the file when a Trainer checkpoint folder is incomplete or corrupt (a run killed
    while it was being written, a truncated copy), instead of a deep error from torch or safetensors later."""
    from safetensors import safe_open

    folder = Path(folder)
    state = folder / "trainer_state.json"
    try:
        json.loads(state.read_text())
    except FileNotFoundError:
        raise ValueError(
            f"checkpoint {folder} is incomplete: {state.name} is missing (interrupted while saving?)"
        ) from None
    except (OSError, ValueError) as err:
        raise ValueError(f"checkpoint file {state} is corrupt or truncated: {err}") from err
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        raise ValueError(f"checkpoint {folder} is incomplete: no model .safetensors file")
    for path in weights:
        try:
            # opening checks the header and that the data covers the file, so a truncated copy fails here
            with safe_open(str(path), framework="pt"):
                pass
        except Exception as err:  # safetensors raises its own error types for a bad header or length
            raise ValueError(f"checkpoint file {path} is corrupt or truncated: {err}") from err
    for name in ("optimizer.pt", "scheduler.pt"):
        path = folder / name
        if not path.is_file() or path.stat().st_size == 0:
            raise ValueError(f"checkpoint {folder} is incomplete: {name} is missing or empty")


def _resume_checkpoint(options: TrainOptions) -> str | None:
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if not options.resume:
        return None
    if isinstance(options.resume, str) and options.resume not in ("last", "true", "True"):
        if not Path(options.resume).is_dir():
            raise FileNotFoundError(f"--resume: checkpoint folder {options.resume} does not exist")
        check_checkpoint(options.resume)
        return options.resume
    folder = Path(options.output_dir)
    candidates = (
        sorted(
            (p for p in folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if p.is_dir() and p.name.split("-")[-1].isdigit()),
            key=lambda p: int(p.name.split("-")[-1]),
        )
        if folder.is_dir()
        else []
    )
    if not candidates:
        raise FileNotFoundError(f"--resume: no checkpoint-* folder in {options.output_dir}")
    # the newest complete one: a run killed while writing its last checkpoint resumes from the one before
    newest_error = None
    for candidate in reversed(candidates):
        try:
            check_checkpoint(candidate)
        except ValueError as err:
            logger.warning("skipping %s: %s", candidate.name, err)
            newest_error = newest_error or err
            continue
        return str(candidate)
    raise newest_error


def train_causal_lm(options: TrainOptions, *, tokenizer=None, data=None, extra_callbacks=()) -> dict:
    """Trains PLDR-LLM (or the Llama baseline) with `PldrTrainer` and writes the run report.

    Output folder: checkpoints (`checkpoint-*`), the final model and tokenizer, `loss_curves.png`,
    `train_report.json` (validation perplexity, order parameter before / after, timings) and TensorBoard logs
    (`runs/`) when `report_to` includes it. `data=(tokenizer, train_blocks, eval_blocks)` reuses prepared data.

    Returns the report as a dict.
    """
    from plldr_hf.training.callbacks import ClipGradValueCallback, DagLossCallback, StepTimerCallback
    from plldr_hf.training.trainer import PldrTrainer

    options = options.resolved()
    checkpoint = _resume_checkpoint(options)
    out = Path(options.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    options_file = out / "run_options.json"
    if checkpoint is not None and options_file.exists():
        previous = json.loads(options_file.read_text())
        for key in ("size", "architecture", "block_size", "vocab_size", "dag_form"):
            if previous.get(key) != getattr(options, key):
                raise ValueError(
                    f"--resume: {key}={getattr(options, key)!r} differs from the run being resumed "
                    f"({previous.get(key)!r} in {options_file})"
                )

    # creating the arguments sets up the distributed state (torchrun / accelerate launch)
    args = reference_training_arguments(
        str(out),
        max_steps=options.max_steps,
        learning_rate=options.learning_rate,
        warmup_steps=options.warmup_steps,
        per_device_train_batch_size=options.batch_size,
        gradient_accumulation_steps=options.gradient_accumulation_steps,
        clip_by=options.clip_by,
        bf16=options.bf16,
        logging_steps=options.logging_steps,
        eval_steps=options.eval_steps if options.eval_steps is not None else max(1, options.max_steps // 5),
        save_steps=options.save_steps,
        save_total_limit=options.save_total_limit,
        report_to=options.report_to or "none",
        seed=options.seed,
    )
    is_main = args.process_index == 0
    # the main process trains and saves the tokenizer first; the others load it, so every rank has the same one
    with args.main_process_first(desc="tokenizer and data", local=False):
        if data is None:
            data = prepare_tokenizer_and_data(options, tokenizer, load_saved=not is_main)
        tokenizer, train_blocks, eval_blocks = data
        if is_main and checkpoint is None:
            options_file.write_text(json.dumps(asdict(options), indent=2))
            # a PldrllmTokenizer writes its SentencePiece model next to it as `tokenizer.model`
            tokenizer.save_pretrained(out)
    model = build_model(options, len(tokenizer))
    report: dict = {
        "options": asdict(options),
        "model": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_blocks": len(train_blocks),
        "eval_blocks": len(eval_blocks),
        "tokens_per_block": options.block_size,
        "vocab_size": len(tokenizer),
    }
    init_file = out / "order_parameter_init.json"
    if checkpoint is None:
        report["order_parameter_before"] = order_parameters(model) if is_main else None
        if is_main:
            init_file.write_text(json.dumps(report["order_parameter_before"]))
    else:
        report["order_parameter_before"] = json.loads(init_file.read_text()) if init_file.exists() else None

    timer = StepTimerCallback()
    callbacks = [timer, *extra_callbacks]
    if options.clip_by == "value":
        callbacks.append(ClipGradValueCallback(1.0))
    if any(options.dag_weights):
        callbacks.append(
            DagLossCallback(weights=options.dag_weights, warmup_steps=options.dag_warmup_steps, form=options.dag_form)
        )
    trainer = PldrTrainer(
        model=model,
        args=args,
        train_dataset=train_blocks,
        eval_dataset=eval_blocks,
        data_collator=training_collator(options),
        processing_class=tokenizer,
        callbacks=callbacks,
        decay_all_parameters=True,
        log_dag_losses=options.log_dag and options.architecture == "pldrllm",
    )
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = trainer.evaluate()
    trainer.save_model()
    if not trainer.is_world_process_zero():
        return {}

    report["train_metrics"] = train_result.metrics
    report["eval_metrics"] = metrics
    report["validation_perplexity"] = perplexity_from_metrics(metrics)
    report["order_parameter_after"] = order_parameters(trainer.model)
    report["timing"] = timer.summary()
    report["global_step"] = trainer.state.global_step
    report["s_per_step"] = seconds_per_step(train_result.metrics, trainer.state.global_step)
    report["loss_curves"] = str(
        plot_loss_curves(
            trainer.state.log_history, out / "loss_curves.png", title=f"{options.architecture} {options.size}"
        )
    )
    (out / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1))
    (out / "train_report.json").write_text(json.dumps(report, indent=2, default=str))
    logger.info("validation perplexity %.3f", report["validation_perplexity"])
    return report


# what --tiny sets unless the flag is given explicitly
TINY_RUN = dict(
    size="tiny", max_steps=30, max_train_documents=2000, vocab_size=512, max_eval_blocks=32, logging_steps=5
)
DEFAULT_RUN = dict(size="tiny", max_steps=100, logging_steps=10)


def options_from_args(args) -> TrainOptions:
    """`TrainOptions` from the parsed `plldr-hf train pldrllm` flags (`--tiny` fills the flags left unset)."""
    base = TINY_RUN if getattr(args, "tiny", False) else DEFAULT_RUN
    for key, value in base.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    report_to = [r for r in args.report_to if r != "none"]
    for name in ("max_steps", "logging_steps", "gradient_accumulation_steps"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return TrainOptions(
        size=args.size,
        output_dir=args.output_dir,
        dataset=list(args.dataset),
        dataset_config=args.dataset_config,
        text_column=args.text_column,
        max_train_documents=args.max_train_documents,
        tokenizer=args.tokenizer,
        vocab_size=args.vocab_size,
        block_size=args.block_size,
        batch_size=args.batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        clip_by=args.clip_by,
        bf16=args.bf16,
        dag_weights=args.dag_weights,
        dag_warmup_steps=args.dag_warmup_steps,
        dag_form=args.dag_form,
        log_dag=args.log_dag,
        logging_steps=args.logging_steps,
        eval_steps=args.eval_steps,
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        max_eval_blocks=args.max_eval_blocks,
        report_to=report_to,
        resume=args.resume,
        seed=args.seed,
        padding_free=args.padding_free,
    )


def _sig(value) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def run_from_args(args) -> int:
    """Entry point of `plldr-hf train pldrllm` and `examples/train_pldr_llm.py`."""
    # the pipeline's own progress lines; other libraries (accelerate, datasets) stay at WARNING
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("plldr_hf").setLevel(logging.INFO)
    report = train_causal_lm(options_from_args(args))
    if report:
        before = ((report.get("order_parameter_before") or {}).get("across_inputs") or {}).get("G_LM")
        after = ((report.get("order_parameter_after") or {}).get("across_inputs") or {}).get("G_LM")
        print(f"validation perplexity: {report['validation_perplexity']:.3g}")
        if before is not None or after is not None:
            print(
                "G_LM order parameter (SOC RMSE/|mean| across the calibration inputs, the collapse criterion): "
                f"before {_sig(before)}, after {_sig(after)}"
            )
        print(f"{_sig(report.get('s_per_step'))} s/step (train_runtime / steps)")
        print(f"report: {Path(args.output_dir, 'train_report.json')}; curves: {report['loss_curves']}")
    return 0
