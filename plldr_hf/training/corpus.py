"""Corpora: where the training and evaluation text comes from, as `datasets` objects.

Embedded corpora (`plldr_hf/data/`, each folder with its source and licence note):

| name | folder | splits |
|---|---|---|
| `libreoffice` | `en_de_libreoffice/` | train / validation / test, English→German (in-domain) |
| `gnome` | `en_de_gnome/` | test only, English→German (out-of-domain) |
| `shakespeare` | `en_shakespeare/` | train / validation / test plain text (causal LM) |

- `load_text_corpus` — documents for a causal LM as a `DatasetDict` (`train`, `validation`; column `text`): the
  embedded Shakespeare corpus (default, offline), local text / JSON / Parquet / CSV files, or any Hugging Face
  dataset.
- `load_translation_dataset` — translation pairs in the WMT schema `{"translation": {"en": ..., "de": ...}}`: WMT17
  from the Hub or a local copy of it, the embedded LibreOffice pairs, or local JSON / JSONL / Parquet files, with
  `train`, `validation`, `test` and the out-of-domain `gnome` test split.
- `streamed_validation_slice` — the fixed held-out slice a streamed run scores (and `plldr-hf evaluate` of its model).
- `take_subset` — a fixed random subset (the evaluation sample limits).

Both loaders name a local file's split from its name (`train*`, `validation*` / `valid*` / `dev*`, `test*`) with the
same rule (`split_from_name`).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from plldr_hf.training.data_checks import (
    SPLIT_ALIASES,
    TABLE_FORMATS,
    TEXT_FORMATS,
    TRANSLATION_FORMATS,
    check_local_files,
    expand_globs,
    file_format,
    is_data_file,
    local_text_files,
    mixed_types_hint,
    split_from_name,
)
from plldr_hf.training.options import is_wmt17


if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict


logger = logging.getLogger(__name__)

__all__ = [
    "DATA_DIR",
    "EMBEDDED_TRANSLATION_DATASETS",
    "STREAMED_EVAL_BLOCKS",
    "embedded_data_path",
    "held_out",
    "load_text_corpus",
    "load_text_stream",
    "load_translation_dataset",
    "streamed_validation_slice",
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


def _embedded_shakespeare() -> dict[str, list[str]]:
    return {split: [str(embedded_data_path("en_shakespeare", f"{split}.txt.gz"))] for split in ("train", "validation")}


def _text_builder(split: str, paths) -> tuple[str, dict]:
    """The `datasets` builder of one split's files (one file type per split) and its options: plain text is read
    one paragraph (blank-line separated) per document."""
    kinds = {file_format(p, {**TEXT_FORMATS, **TABLE_FORMATS}) for p in paths}
    if len(kinds) > 1:
        raise ValueError(mixed_types_hint(split, paths))
    kind = kinds.pop()
    return kind, {"sample_by": "paragraph"} if kind == "text" else {}


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

    specs = expand_globs(dataset)
    if not specs or (len(specs) == 1 and specs[0].lower() == "shakespeare" and not Path(specs[0]).exists()):
        raw = load_dataset("text", data_files=_embedded_shakespeare(), sample_by="paragraph", cache_dir=cache_dir)
        origin = "the embedded Shakespeare corpus"
    elif all(Path(s).expanduser().exists() for s in specs):
        files = local_text_files(specs)
        files.pop("test", None)
        if "train" not in files:
            raise ValueError(f"no training files among {specs} (files named test* / validation* are not training)")
        check_local_files(files, text_column)
        splits = {}
        for split, paths in files.items():
            kind, extra = _text_builder(split, paths)
            splits[split] = read_data_files(kind, paths, cache_dir, **extra)
        raw = DatasetDict(splits)
        origin = f"local files {specs}"
    elif len(specs) == 1:
        name = specs[0]
        try:
            raw = load_dataset(name, dataset_config, cache_dir=cache_dir)
        except Exception as err:
            raise ValueError(
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
        ds = ds.filter(lambda ex: _is_document(ex["text"], origin), desc=f"Dropping empty {split}")
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


def _is_document(text, origin: str) -> bool:
    """Whether a text value is a document to keep (not empty); a value that is not text is refused."""
    if text is not None and not isinstance(text, str):
        raise ValueError(
            f"{origin}: a text value is {type(text).__name__} {str(text)[:40]}, not text; choose the text column with "
            "--text-column, or fix the data"
        )
    return bool(text and text.strip())


def read_documents(dataset, text_column: str = "text"):
    """Every document of local files, folders or globs (each format `train` reads, compressed too), whatever split
    their names give: one `Dataset` with column `text`, empty documents dropped. For scoring a model on files whole."""
    from datasets import concatenate_datasets

    specs = expand_globs(dataset)
    missing = [spec for spec in specs if not Path(spec).expanduser().exists()]
    if missing:
        raise FileNotFoundError(f"no such file or folder: {', '.join(missing)}")
    files = local_text_files(specs)
    check_local_files(files, text_column)
    parts = []
    for split, paths in files.items():
        kind, extra = _text_builder(split, paths)
        part = read_data_files(kind, paths, None, **extra).select_columns([text_column])
        if text_column != "text":
            part = part.rename_column(text_column, "text")
        origin = ", ".join(str(p) for p in paths)
        part = part.filter(lambda ex, origin=origin: _is_document(ex["text"], origin), desc="Dropping empty documents")
        parts.append(part.map(lambda ex: {"text": ex["text"].strip()}, desc="Stripping documents"))
    return concatenate_datasets(parts)


def held_out(text: str, share: float) -> bool:
    """Whether a document belongs to the held-out validation slice of a stream without a validation split: a hash of
    its text falls in the first `share` of the range. The rule needs no position in the stream, so every process
    and every sharding of the stream holds out the same documents."""
    import hashlib

    digest = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
    return digest < share * 2**64


def load_text_stream(
    dataset: str | Sequence[str] | None = None,
    *,
    dataset_config: str | None = None,
    text_column: str = "text",
    held_out_share: float = 0.01,
    cache_dir: str | None = None,
):
    """The corpus as streams of documents (`datasets.IterableDataset`, column `text`): `(train, validation)`.

    Nothing is loaded whole: documents are read from the files (or the Hub) as the training consumes them, so memory
    does not grow with the corpus. `dataset` as for `load_text_corpus` (local files, folders or globs of text / JSON /
    Parquet / CSV files, compressed too; a Hub dataset name; none: the embedded corpus). Each file is one shard of the
    stream (processes read whole shards of their own). Validation: the `validation*` files or the dataset's
    validation split, else the documents `held_out` selects (`held_out_share` of them), which training then skips.
    """
    from datasets import load_dataset

    specs = expand_globs(dataset)
    if not specs or (len(specs) == 1 and specs[0].lower() == "shakespeare" and not Path(specs[0]).exists()):
        files = {"train": [Path(p) for p in _embedded_shakespeare()["train"]]}
        files["validation"] = [Path(p) for p in _embedded_shakespeare()["validation"]]
    elif all(Path(s).expanduser().exists() for s in specs):
        files = local_text_files(specs)
        files.pop("test", None)
        if "train" not in files:
            raise ValueError(f"no training files among {specs} (files named test* / validation* are not training)")
        check_local_files(files, text_column)
    elif len(specs) == 1:
        files = None
    else:
        missing = [s for s in specs if not Path(s).expanduser().exists()]
        raise FileNotFoundError(f"dataset files not found: {missing}")

    streams = {}
    if files is None:
        try:
            hub = load_dataset(specs[0], dataset_config, streaming=True, cache_dir=cache_dir)
        except Exception as err:
            raise ValueError(
                f"could not stream dataset {specs[0]!r} (config {dataset_config!r}): neither an existing local path "
                f"nor a loadable Hugging Face dataset ({type(err).__name__}: {err})"
            ) from err
        streams = {k: hub[k] for k in ("train", "validation") if k in hub}
    else:
        for split, paths in files.items():
            kind, extra = _text_builder(split, paths)
            streams[split] = load_dataset(
                kind, data_files=[str(p) for p in paths], split="train", streaming=True, cache_dir=cache_dir, **extra
            )
    if "train" not in streams:
        raise ValueError(f"dataset {specs[0]!r} has no 'train' split")
    for split, stream in list(streams.items()):
        if stream.column_names is not None and text_column not in stream.column_names:
            raise ValueError(
                f"split {split!r}: no text column {text_column!r}; columns are {stream.column_names} "
                "(choose one with --text-column)"
            )
        stream = stream.select_columns([text_column])
        if text_column != "text":
            stream = stream.rename_column(text_column, "text")
        stream = stream.filter(lambda ex, origin=f"split {split!r}": _is_document(ex["text"], origin))
        streams[split] = stream.map(lambda ex: {"text": ex["text"].strip()})
    if "validation" not in streams:
        if not 0.0 < held_out_share < 1.0:
            raise ValueError(f"held_out_share must be in (0, 1), got {held_out_share}")
        train = streams["train"]
        streams["validation"] = train.filter(lambda ex: held_out(ex["text"], held_out_share))
        streams["train"] = train.filter(lambda ex: not held_out(ex["text"], held_out_share))
    return streams["train"], streams["validation"]


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


def take_subset(dataset: Dataset, n: int | None, seed: int = 0) -> Dataset:
    """At most `n` rows: a fixed random subset, the same for every run with the same seed (None: all rows).

    Fixed so that the test subsets stay comparable across runs; `seed` here is the data seed, not the training seed.
    """
    if n is None or n >= len(dataset):
        return dataset
    if n <= 0:
        raise ValueError(f"sample limit must be positive, got {n}")
    return dataset.shuffle(seed=seed).select(range(n))


def _resolve_files(specs: Sequence[str | os.PathLike]) -> dict[str, list[Path]]:
    """Maps `split=path`, bare file and directory arguments to {split: [files]} (see `load_translation_dataset`)."""
    files: dict[str, list[Path]] = {}
    unassigned: list[Path] = []
    for spec in specs:
        spec = str(spec)
        split, sep, path_text = spec.partition("=")
        if sep and split and not Path(spec).exists():
            split = SPLIT_ALIASES.get(split.lower(), split)
            path = Path(path_text).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"data file for split {split!r} not found: {path}")
            file_format(path, TRANSLATION_FORMATS)
            files.setdefault(split, []).append(path)
            continue
        path = Path(spec).expanduser()
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and split_from_name(p) is not None)
            found = [p for p in found if is_data_file(p, TRANSLATION_FORMATS)]
            if not found:
                raise FileNotFoundError(
                    f"no train*/validation*/dev*/test* .json, .jsonl(.gz) or .parquet files in directory {path}"
                )
            for p in found:
                files.setdefault(split_from_name(p), []).append(p)
        elif path.is_file():
            file_format(path, TRANSLATION_FORMATS)
            split = split_from_name(path)
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


# errno values of a file system that refuses a write (full, quota, size limit, read-only)
_FILE_SYSTEM_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def read_data_files(kind: str, paths, cache_dir: str | None, **options):
    """One split from local files with the datasets library's builder `kind` (text, json, parquet, csv); a file it
    cannot parse is a `ValueError` naming the files and the parser's message (datasets wraps it in a generic
    `DatasetGenerationError`)."""
    from datasets import load_dataset

    if all(os.path.getsize(p) == 0 for p in paths):  # datasets cannot build a split from no rows
        raise ValueError(f"no text in {', '.join(str(p) for p in paths)} (empty file); give files with text")
    try:
        return load_dataset(kind, data_files=[str(p) for p in paths], split="train", cache_dir=cache_dir, **options)
    except Exception as err:
        if not type(err).__module__.startswith("datasets"):
            raise
        cause = err.__cause__ or err.__context__ or err
        if isinstance(cause, OSError) and cause.errno in _FILE_SYSTEM_FAULTS:
            raise cause from err  # writing the datasets cache failed (full disk, a size limit): not the file's fault
        names = ", ".join(str(p) for p in paths)
        raise ValueError(f"could not read {names} as {kind}: {cause}; fix or remove the file") from err


def _load_files(files: dict[str, list[Path]], cache_dir: str | None) -> DatasetDict:
    from datasets import DatasetDict

    splits = {}
    for split, paths in files.items():
        formats = {file_format(p, TRANSLATION_FORMATS) for p in paths}
        if len(formats) > 1:
            raise ValueError(f"split {split!r} mixes file formats {sorted(formats)}: {[str(p) for p in paths]}")
        splits[split] = read_data_files(formats.pop(), paths, cache_dir)
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
        raise ValueError(
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
    elif name is not None and is_wmt17(name) and not Path(name).exists():
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
