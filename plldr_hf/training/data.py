"""Data loading and preprocessing for training and evaluation.

Embedded corpora (`plldr_hf/data/`, each folder with its source and licence note):

| name | folder | splits |
|---|---|---|
| `libreoffice` | `en_de_libreoffice/` | train / validation / test, English→German (in-domain) |
| `gnome` | `en_de_gnome/` | test only, English→German (out-of-domain) |
| `shakespeare` | `en_shakespeare/` | train / validation / test plain text (causal LM) |

Sequence-to-sequence part (translation, WMT schema `{"translation": {"en": ..., "de": ...}}`):

- `load_translation_dataset` — WMT17 from the Hub, the embedded LibreOffice pairs, or local JSON / JSONL / Parquet
  files, as a `DatasetDict` with `train`, `validation`, `test` and the out-of-domain `gnome` test split.
- `train_joint_tokenizer` — one subword vocabulary (BPE or unigram, `tokenizers`) for both languages, returned as a
  `PreTrainedTokenizerFast` with `<pad>`, `<s>`, `</s>`, `<unk>`; it appends `</s>` to every sequence.
- `preprocess_translation` — tokenises sources into `input_ids` and targets into `labels` (unshifted; the model's
  `prepare_decoder_input_ids_from_labels` / `DataCollatorForSeq2Seq` build the decoder inputs).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict
    from transformers import PreTrainedTokenizerFast


logger = logging.getLogger(__name__)

__all__ = [
    "DATA_DIR",
    "EMBEDDED_TRANSLATION_DATASETS",
    "SPECIAL_TOKENS",
    "embedded_data_path",
    "load_translation_dataset",
    "train_joint_tokenizer",
    "preprocess_translation",
    "take_subset",
]

DATA_DIR = Path(__file__).resolve().parents[1] / "data"

EMBEDDED_TRANSLATION_DATASETS = {
    "libreoffice": {
        "train": "en_de_libreoffice/train.jsonl.gz",
        "validation": "en_de_libreoffice/validation.jsonl.gz",
        "test": "en_de_libreoffice/test.jsonl.gz",
    },
}
# the out-of-domain test set added to every English–German dataset as split "gnome"
GNOME_TEST = "en_de_gnome/test.jsonl.gz"

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}

_SPLIT_ALIASES = {
    "train": "train",
    "validation": "validation",
    "valid": "validation",
    "dev": "validation",
    "test": "test",
}
_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def embedded_data_path(*parts: str) -> Path:
    """Path of a file or folder inside the package's embedded `data/` folder; raises if it is missing.

    Example:
        >>> embedded_data_path("en_de_gnome", "test.jsonl.gz").name
        'test.jsonl.gz'
    """
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"embedded data file {path} is missing; reinstall plldr_hf (package data `data/**`)")
    return path


def _file_format(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in (".gz", ".bz2", ".xz", ".zst"):
        suffixes = suffixes[:-1]
    fmt = _FORMATS.get(suffixes[-1] if suffixes else "")
    if fmt is None:
        raise ValueError(
            f"cannot read {path}: unsupported file type {''.join(path.suffixes) or '(none)'}; "
            "use .json, .jsonl (optionally .gz) or .parquet"
        )
    return fmt


def _split_from_name(path: Path) -> str | None:
    stem = path.name.split(".")[0].lower()
    for prefix, split in _SPLIT_ALIASES.items():
        if stem == prefix or stem.startswith((prefix + "_", prefix + "-")):
            return split
    return None


def _resolve_files(specs: Sequence[str | os.PathLike]) -> dict[str, list[Path]]:
    """Maps `split=path`, bare file and directory arguments to {split: [files]} (see `load_translation_dataset`)."""
    files: dict[str, list[Path]] = {}
    unassigned: list[Path] = []
    for spec in specs:
        spec = str(spec)
        split, sep, path_text = spec.partition("=")
        if sep and split and not Path(spec).exists():
            split = _SPLIT_ALIASES.get(split.lower(), split)
            path = Path(path_text).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"data file for split {split!r} not found: {path}")
            _file_format(path)
            files.setdefault(split, []).append(path)
            continue
        path = Path(spec).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and _split_from_name(p) is not None)
            found = [p for p in found if _is_data_file(p)]
            if not found:
                raise FileNotFoundError(
                    f"no train*/validation*/dev*/test* .json, .jsonl(.gz) or .parquet files in directory {path}"
                )
            for p in found:
                files.setdefault(_split_from_name(p), []).append(p)
        elif path.is_file():
            _file_format(path)
            split = _split_from_name(path)
            if split is None:
                unassigned.append(path)
            else:
                files.setdefault(split, []).append(path)
        else:
            raise FileNotFoundError(
                f"dataset {spec!r} is neither a known name ({', '.join(sorted(EMBEDDED_TRANSLATION_DATASETS))}, "
                "wmt17) nor an existing file or directory"
            )
    if unassigned:
        if "train" in files:
            names = ", ".join(str(p) for p in unassigned)
            raise ValueError(f"cannot tell which split {names} belongs to; pass it as SPLIT=PATH (e.g. test={names})")
        files["train"] = unassigned
    if "train" not in files:
        raise ValueError(f"no training data among {[str(s) for s in specs]}; give a train file or train=PATH")
    return files


def _is_data_file(path: Path) -> bool:
    try:
        _file_format(path)
    except ValueError:
        return False
    return True


def _to_translation_schema(ds: Dataset, source_lang: str, target_lang: str, origin: str) -> Dataset:
    """Casts a split to the WMT schema with exactly the two languages; accepts flat `en` / `de` columns too."""
    from datasets import Features, Translation

    langs = [source_lang, target_lang]
    if "translation" in ds.column_names:
        feature = ds.features["translation"]
        keys = list(feature.languages) if isinstance(feature, Translation) else list(getattr(feature, "keys", list)())
        missing = [lang for lang in langs if lang not in keys]
        if missing:
            raise ValueError(
                f"{origin}: the 'translation' column has languages {keys}, missing {missing} "
                f"(needed for {source_lang}→{target_lang})"
            )
        extra = [c for c in ds.column_names if c != "translation"]
        ds = ds.remove_columns(extra) if extra else ds
        if set(keys) != set(langs):
            ds = ds.map(
                lambda ex: {"translation": {lang: ex["translation"][lang] for lang in langs}},
                features=Features({"translation": Translation(languages=langs)}),
            )
        return ds.cast(Features({"translation": Translation(languages=langs)}))
    if all(lang in ds.column_names for lang in langs):
        return ds.map(
            lambda ex: {"translation": {lang: ex[lang] for lang in langs}},
            remove_columns=ds.column_names,
            features=Features({"translation": Translation(languages=langs)}),
        )
    raise ValueError(
        f"{origin} has columns {ds.column_names}; expected a 'translation' column with keys "
        f"{source_lang!r} and {target_lang!r} (the WMT schema) or columns {source_lang!r} and {target_lang!r}"
    )


def _load_files(files: dict[str, list[Path]], cache_dir: str | None) -> DatasetDict:
    from datasets import DatasetDict, load_dataset

    splits = {}
    for split, paths in files.items():
        formats = {_file_format(p) for p in paths}
        if len(formats) > 1:
            raise ValueError(f"split {split!r} mixes file formats {sorted(formats)}: {[str(p) for p in paths]}")
        splits[split] = load_dataset(
            formats.pop(), data_files=[str(p) for p in paths], split="train", cache_dir=cache_dir
        )
    return DatasetDict(splits)


def _load_wmt17(
    source_lang: str, target_lang: str, cache_dir: str | None, local_dir: str | os.PathLike | None = None
) -> DatasetDict:
    """`wmt/wmt17` from the Hub, or from `local_dir`, a local copy of that dataset repository (its
    `<xx>-en/{train,validation,test}-*.parquet` files, e.g. from `hf download wmt/wmt17 --repo-type dataset
    --include "de-en/*" --local-dir DIR`): the same files, split names and schema, loaded without the network."""
    from datasets import load_dataset

    if "en" not in (source_lang, target_lang) or source_lang == target_lang:
        raise ValueError(f"WMT17 pairs English with another language; got {source_lang}→{target_lang}")
    other = target_lang if source_lang == "en" else source_lang
    if local_dir is not None:
        folder = Path(local_dir) / f"{other}-en"
        files = {split: sorted(folder.glob(f"{split}-*.parquet")) for split in ("train", "validation", "test")}
        missing = [split for split, paths in files.items() if not paths]
        if missing:
            raise FileNotFoundError(
                f"{folder} holds no {'/'.join(missing)}-*.parquet file; expected a copy of the Hub dataset "
                f"wmt/wmt17 with the folder {other}-en/ (hf download wmt/wmt17 --repo-type dataset "
                f'--include "{other}-en/*" --local-dir {local_dir})'
            )
        return _load_files(files, cache_dir)
    try:
        return load_dataset("wmt/wmt17", f"{other}-en", cache_dir=cache_dir)
    except Exception as err:
        raise RuntimeError(
            f"could not load WMT17 ({other}-en) from the Hugging Face Hub (dataset 'wmt/wmt17'): {err}. "
            "It needs network access or a cached copy; offline, pass a local copy of the dataset repository "
            "(wmt17_dir=, --wmt17-dir), or use --dataset libreoffice or local files."
        ) from err


def load_translation_dataset(
    dataset: str | os.PathLike | Sequence[str | os.PathLike] = "libreoffice",
    source_lang: str = "en",
    target_lang: str = "de",
    *,
    validation_size: int = 1000,
    test_size: int = 1000,
    out_of_domain_test: bool = True,
    seed: int = 0,
    cache_dir: str | None = None,
    wmt17_dir: str | os.PathLike | None = None,
) -> DatasetDict:
    """Loads a translation corpus in the WMT schema as a `DatasetDict`.

    Args:
        dataset: one of
            - `"libreoffice"`: the embedded LibreOffice help pairs (offline);
            - `"wmt17"`: `wmt/wmt17` from the Hub (needs the network or a cache; newstest2016 / newstest2017 are its
              validation / test splits);
            - local files: paths (or a list of them) to `.json`, `.jsonl` (optionally gzip-compressed) or
              `.parquet` files, or directories holding them. `SPLIT=PATH` names a file's split explicitly;
              otherwise the split comes from the file name (`train*`, `validation*` / `valid*` / `dev*`, `test*`),
              and a single unnamed file is the training split. Other `SPLIT=PATH` names add extra test sets.
              Records use the WMT schema `{"translation": {"en": ..., "de": ...}}` or flat `en` / `de` columns.
        source_lang: source language code, a key of the `translation` records.
        target_lang: target language code.
        validation_size: for local files without a validation split, the number of training pairs held out for it.
        test_size: likewise for a missing test split.
        out_of_domain_test: add the embedded GNOME pairs as split `gnome` (English–German datasets only).
        seed: seed of the held-out selection above.
        cache_dir: `datasets` cache folder.
        wmt17_dir: with `"wmt17"`, a local copy of the Hub dataset repository `wmt/wmt17` to read instead of the Hub.

    Returns:
        `DatasetDict` with `train`, `validation`, `test` (and `gnome`), each with one `translation` column holding
        exactly `source_lang` and `target_lang`.

    Example:
        >>> ds = load_translation_dataset("libreoffice")
        >>> sorted(ds), ds["train"][0]["translation"]["en"]
        (['gnome', 'test', 'train', 'validation'], 'Calling Python Scripts from Basic')
    """
    from datasets import DatasetDict

    if isinstance(dataset, (str, os.PathLike)):
        name = str(dataset)
        specs = [dataset]
    else:
        name, specs = None, list(dataset)
        if not specs:
            raise ValueError("empty list of dataset files")
    if name is not None and name.lower() in EMBEDDED_TRANSLATION_DATASETS and not Path(name).exists():
        langs = {source_lang, target_lang}
        if langs != {"en", "de"}:
            raise ValueError(f"the embedded {name!r} corpus is English–German; got {source_lang}→{target_lang}")
        files = {s: [embedded_data_path(f)] for s, f in EMBEDDED_TRANSLATION_DATASETS[name.lower()].items()}
        raw = _load_files(files, cache_dir)
        origin = f"embedded dataset {name!r}"
    elif name is not None and name.lower() in ("wmt17", "wmt/wmt17") and not Path(name).exists():
        raw = _load_wmt17(source_lang, target_lang, cache_dir, wmt17_dir)
        origin = "wmt/wmt17"
    else:
        raw = _load_files(_resolve_files(specs), cache_dir)
        origin = "local files"

    splits = {
        split: _to_translation_schema(ds, source_lang, target_lang, f"{origin} split {split!r}")
        for split, ds in raw.items()
    }
    for split, wanted in (("validation", validation_size), ("test", test_size)):
        if split in splits:
            continue
        train = splits["train"]
        if len(train) < 2 * wanted:
            raise ValueError(
                f"no {split} split given and the training split has only {len(train)} pairs, too few to hold out "
                f"{wanted}; pass {split}=PATH"
            )
        parts = train.train_test_split(test_size=wanted, seed=seed, shuffle=True)
        splits["train"], splits[split] = parts["train"], parts["test"]
        logger.info("held out %d training pairs as the %s split", wanted, split)
    if out_of_domain_test and {source_lang, target_lang} == {"en", "de"} and "gnome" not in splits:
        gnome = _load_files({"gnome": [embedded_data_path(GNOME_TEST)]}, cache_dir)["gnome"]
        splits["gnome"] = _to_translation_schema(gnome, source_lang, target_lang, "embedded GNOME test set")
    for split, ds in splits.items():
        if len(ds) == 0:
            raise ValueError(f"split {split!r} of {origin} is empty")
    return DatasetDict(splits)


def take_subset(dataset: Dataset, n: int | None, seed: int = 0) -> Dataset:
    """At most `n` rows: a fixed random subset, the same for every run with the same seed (None: all rows).

    Fixed so that the test subsets stay comparable across runs; `seed` here is the data seed, not the training seed.
    """
    if n is None or n >= len(dataset):
        return dataset
    if n <= 0:
        raise ValueError(f"sample limit must be positive, got {n}")
    return dataset.shuffle(seed=seed).select(range(n))


def _sentences(data, languages: Sequence[str], max_sentences: int | None, seed: int) -> Iterator[str]:
    """Yields the texts of every language of a `translation` dataset (or passes a plain iterable of strings)."""
    if hasattr(data, "column_names"):
        n = len(data)
        indices = list(range(n))
        if max_sentences is not None and n * len(languages) > max_sentences:
            random.Random(seed).shuffle(indices)
            indices = sorted(indices[: max(1, max_sentences // len(languages))])
        for start in range(0, len(indices), 1000):
            for pair in data.select(indices[start : start + 1000])["translation"]:
                for lang in languages:
                    yield pair[lang]
    else:
        for i, text in enumerate(data):
            if max_sentences is not None and i >= max_sentences:
                break
            if not isinstance(text, str):
                raise TypeError(f"tokenizer training text {i} is {type(text).__name__}, expected str")
            yield text


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
    if vocab_size <= len(specials):
        raise ValueError(f"vocab_size={vocab_size} leaves no room beyond the {len(specials)} special tokens")
    if model == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials, limit_alphabet=1000
        )
    elif model == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=specials, unk_token=SPECIAL_TOKENS["unk_token"]
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
    Pad and shift are left to `DataCollatorForSeq2Seq` and the model.

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
    return tokenized.filter(fits, num_proc=num_proc, desc="Dropping long pairs") if drop_long else tokenized
