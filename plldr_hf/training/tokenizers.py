"""Tokenizer training for both families.

- `train_sentencepiece_tokenizer` (PLDR-LLM) — a SentencePiece unigram model with byte fallback and the released
  special ids (`[PAD]` 0, `[UNK]` 1, `[START]` 2, `[END]` 3, `[SEP]` 4, `[CLS]` 5, bytes from 6; the released PLDR-LLM tokenizer),
  returned as a `PldrllmTokenizer` that encodes exactly like SentencePiece.
- `train_joint_tokenizer` (AGF) — one subword vocabulary (BPE or unigram, `tokenizers`) for both languages, returned
  as a `PreTrainedTokenizerFast` with `<pad>`, `<s>`, `</s>`, `<unk>`; it appends `</s>` to every sequence.
"""

from __future__ import annotations

import io
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from plldr_hf.models.pldrllm.tokenization_pldrllm import SPECIAL_PIECES, PldrllmTokenizer


if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast


__all__ = [
    "SPECIAL_TOKENS",
    "USER_PIECES",
    "train_sentencepiece_tokenizer",
    "translation_token_fields",
    "tokenizer_from_sentencepiece",
    "train_joint_tokenizer",
]

# the AGF translation tokenizer's special tokens, ids 0..3 in this order
SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
# the released PLDR-LLM tokenizer's user symbols, ids 4 and 5
USER_PIECES = ("[SEP]", "[CLS]")


def _texts(data, max_documents: int | None) -> Iterable[str]:
    if hasattr(data, "column_names"):
        n = len(data) if max_documents is None else min(max_documents, len(data))
        for start in range(0, n, 1000):
            yield from data[start : min(n, start + 1000)]["text"]
    else:
        yield from _strings(data, max_documents)


def _strings(data: Iterable, limit: int | None) -> Iterator[str]:
    for i, text in enumerate(data):
        if limit is not None and i >= limit:
            break
        if not isinstance(text, str):
            raise TypeError(f"tokenizer training text {i} is {type(text).__name__}, expected str")
        yield text


def _sentences(data, languages: Sequence[str], max_sentences: int | None, seed: int) -> Iterator[str]:
    """Yields the texts of every language of a `translation` dataset (or passes a plain iterable of strings)."""
    if not hasattr(data, "column_names"):
        yield from _strings(data, max_sentences)
        return
    n = len(data)
    indices = list(range(n))
    if max_sentences is not None and n * len(languages) > max_sentences:
        random.Random(seed).shuffle(indices)
        indices = sorted(indices[: max(1, max_sentences // len(languages))])
    for start in range(0, len(indices), 1000):
        for pair in data.select(indices[start : start + 1000])["translation"]:
            for lang in languages:
                yield pair[lang]


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
    (the released PLDR-LLM tokenizer's settings). The vocabulary is a soft limit: a small corpus gets fewer pieces. The SentencePiece model is
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


def train_joint_tokenizer(
    data: Dataset | Iterable[str],
    vocab_size: int = 8000,
    *,
    languages: Sequence[str] = ("en", "de"),
    model: str = "bpe",
    min_frequency: int = 2,
    max_sentences: int | None = 1_000_000,
    model_max_length: int = 1024,
    seed: int = 0,
) -> PreTrainedTokenizerFast:
    """Trains one subword vocabulary shared by source and target language.

    SentencePiece-style pipeline from the `tokenizers` library: NFKC normalisation, `Metaspace` pre-tokenisation
    (spaces become `▁`, so decoding restores the original spacing), BPE or unigram model, and a post-processor that
    appends `</s>`. Special tokens have fixed ids: `<pad>` 0, `<s>` 1, `</s>` 2, `<unk>` 3. The result saves and
    reloads with `save_pretrained` / `AutoTokenizer.from_pretrained`.

    Args:
        data: a translation dataset split (texts of every language in `languages` are used) or an iterable of
            strings.
        vocab_size: target vocabulary size including the special tokens.
        languages: the `translation` keys to read from a dataset.
        model: `"bpe"` or `"unigram"`.
        min_frequency: minimum pair frequency for a BPE merge.
        max_sentences: use a random subset of at most this many sentences (None: all).
        model_max_length: maximum length recorded in the tokenizer config.
        seed: seed of the subset selection.

    Example:
        >>> tok = train_joint_tokenizer(["ein kleiner Test", "a small test"] * 50, vocab_size=40)
        >>> tok.decode(tok("a small test")["input_ids"], skip_special_tokens=True)
        'a small test'
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(SPECIAL_TOKENS.values())
    # no progress display: it takes seconds, and off a terminal the trainer writes only blank lines to stdout
    quiet = {"show_progress": False}
    if vocab_size <= len(specials):
        raise ValueError(f"vocab_size={vocab_size} leaves no room beyond the {len(specials)} special tokens")
    if model == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials, limit_alphabet=1000, **quiet
        )
    elif model == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=specials, unk_token=SPECIAL_TOKENS["unk_token"], **quiet
        )
    else:
        raise ValueError(f"unknown tokenizer model {model!r}; use 'bpe' or 'unigram'")
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")

    texts = _sentences(data, languages, max_sentences, seed)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    if tokenizer.get_vocab_size() < len(specials) + 1:
        raise ValueError("tokenizer training produced an empty vocabulary; is the training text empty?")
    eos = SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.token_to_id(eos))]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=model_max_length, **SPECIAL_TOKENS)


def translation_token_fields(tokenizer) -> dict:
    """The translator's config fields that its joint tokenizer decides: the vocabulary size and the pad, bos and eos
    ids, decoding starting with `<s>`."""
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if getattr(tokenizer, name) is None:
            raise ValueError(f"the tokenizer has no {name[:-3]}; translation needs <pad>, <s> and </s> tokens")
    return {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": tokenizer.bos_token_id,
    }
