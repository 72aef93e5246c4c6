"""What a local data file of a training run is, and the faults it may have: its format from its name
(`file_format`), a check of each file's start as its `datasets` builder reads it (`check_local_files`), and which
exceptions met while reading are the file's fault (`is_data_fault`). A fault is a ValueError naming the file (and the
row) and the fix, not a traceback from the builder later, or in the middle of a streamed run. Imports only the
standard library until a file is checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


__all__ = [
    "TABLE_FORMATS",
    "TEXT_FORMATS",
    "COMPRESSION_SUFFIXES",
    "SPLIT_ALIASES",
    "check_local_files",
    "damaged_file",
    "data_fault_message",
    "expand_globs",
    "local_text_files",
    "split_from_name",
    "file_format",
    "is_data_file",
    "is_data_fault",
    "mixed_types_hint",
    "open_maybe_compressed",
]

# the local file types each reader takes (after a compression suffix)
TEXT_FORMATS = {".txt": "text", ".text": "text", ".md": "text"}
TABLE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
TRANSLATION_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")


def file_format(path: Path, formats: dict[str, str]) -> str:
    """The `datasets` builder (`text`, `json`, `parquet`, `csv`) of a file, from its suffix before any compression
    suffix; a clear error naming the accepted types otherwise."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSION_SUFFIXES:
        suffixes = suffixes[:-1]
    kind = formats.get(suffixes[-1] if suffixes else "")
    if kind is None:
        accepted = ", ".join(sorted(formats))
        raise ValueError(
            f"cannot read {path}: unsupported file type {''.join(path.suffixes) or '(none)'}; use {accepted} "
            "(optionally compressed: .gz)"
        )
    return kind


def open_maybe_compressed(path: Path):
    """A binary file object of `path`, decompressed by its suffix (.gz, .bz2, .xz; .zst when zstandard is there)."""
    suffix = path.suffix.lower()
    if suffix == ".gz":
        import gzip

        return gzip.open(path, "rb")
    if suffix == ".bz2":
        import bz2

        return bz2.open(path, "rb")
    if suffix == ".xz":
        import lzma

        return lzma.open(path, "rb")
    if suffix == ".zst":
        try:
            import zstandard
        except ImportError:
            return None
        return zstandard.open(path, "rb")
    return open(path, "rb")


def _first_record_problem(path: Path, kind: str, text_column: str) -> str | None:
    """What is wrong with the start of one local data file, read as its builder reads it (None: nothing): empty, not
    decompressible, not UTF-8, a first JSON line or CSV header without the text column, a first text value that is
    not text, a Parquet file without its footer or the column."""
    import json

    if path.stat().st_size == 0:
        return "it is empty (no text)"
    if kind == "parquet":
        try:
            import pyarrow.parquet as pq

            schema = pq.ParquetFile(path).schema_arrow
        except Exception as err:  # pyarrow's own error types
            return f"it is not a readable Parquet file ({type(err).__name__}: {err})"
        if text_column not in schema.names:
            return f"no text column {text_column!r} (columns: {schema.names}; choose one with --text-column)"
        if str(schema.field(text_column).type) not in ("string", "large_string", "string_view"):
            return f"its column {text_column!r} holds {schema.field(text_column).type}, not text"
        return None
    try:
        handle = open_maybe_compressed(path)
        if handle is None:
            return None
        with handle:
            head = handle.read(1 << 16)
            if kind != "text" and b"\n" not in head:
                head += handle.readline(1 << 20)
            if kind == "text" and path.suffix.lower() in COMPRESSION_SUFFIXES:
                # the text builder reads a whole file before its first paragraph: decompress it all now
                while handle.read(1 << 24):
                    pass
    except (OSError, EOFError, ValueError) as err:  # gzip/lzma/bz2 raise these for damaged or truncated data
        return f"it cannot be decompressed ({type(err).__name__}: {err})"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as err:
        if len(head) == 1 << 16 and err.start > len(head) - 4:
            text = head[: err.start].decode("utf-8")  # a character cut by the 64 KiB read
        else:
            return f"it is not UTF-8 text (byte {err.start})"
    if kind == "json":
        first = next((line for line in text.splitlines() if line.strip()), "")
        if first.lstrip().startswith("["):
            return None  # a JSON array: its records are checked as the builder reads them
        try:
            record = json.loads(first)
        except (json.JSONDecodeError, RecursionError) as err:
            return f"row 1 is not a JSON object ({err})"
        if not isinstance(record, dict):
            return f"row 1 is not a JSON object but {type(record).__name__}"
        if text_column not in record:
            return f"no text column {text_column!r} in row 1 (its fields: {sorted(record)}; choose one with --text-column)"
        if record[text_column] is not None and not isinstance(record[text_column], str):
            value = record[text_column]
            return f"row 1's {text_column!r} is {type(value).__name__} {json.dumps(value)[:40]}, not text"
    if kind == "csv":
        import csv

        header = next(csv.reader(text.splitlines()[:1]), [])
        if text_column not in header:
            return f"no text column {text_column!r} in its header (columns: {header}; choose one with --text-column)"
        if len(head) < 1 << 16:  # the whole file was read: every row parses, or the first that does not is named
            reader = csv.reader(text.splitlines(keepends=True), strict=True)
            try:
                for _ in reader:
                    pass
            except csv.Error as err:
                return f"row {reader.line_num} is not valid CSV ({err})"
    return None


def is_data_fault(error: BaseException) -> bool:
    """Whether an exception raised while a data file was read is the file's fault (truncated or damaged compression,
    bytes that are not UTF-8, a JSON, CSV or Parquet parse error), not the program's."""
    import json
    import lzma
    import zlib

    if isinstance(error, (EOFError, UnicodeDecodeError, zlib.error, lzma.LZMAError, json.JSONDecodeError)):
        return True
    return type(error).__module__.split(".")[0] in ("pyarrow", "pandas") or type(error).__name__ == "BadGzipFile"


def check_local_files(files: dict[str, list[Path]], text_column: str = "text") -> None:
    """Every local data file of a run, checked at its start before anything is read for training, as its builder
    reads it: a fault is a ValueError naming the file (and the row) and the fix, not a traceback from the builder
    later, or in the middle of a streamed run."""
    for paths in files.values():
        for path in paths:
            kind = file_format(path, {**TEXT_FORMATS, **TABLE_FORMATS})
            problem = _first_record_problem(path, kind, text_column)
            if problem:
                raise ValueError(f"cannot read {path}: {problem}; fix or remove the file")


def mixed_types_hint(split: str, paths) -> str:
    """The one-line refusal of a split whose files are of several types, with what to do instead."""
    kinds = sorted({file_format(p, {**TEXT_FORMATS, **TABLE_FORMATS}) for p in paths})
    return (
        f"split {split!r} mixes file types {kinds} ({len(paths)} files): datasets reads one type per split; give the "
        f"files of one type (a glob such as 'shards/*.{kinds[0]}'), or convert the others"
    )


SPLIT_ALIASES = {
    "train": "train",
    "validation": "validation",
    "valid": "validation",
    "dev": "validation",
    "test": "test",
}
# file suffix → `datasets` builder; text files only for the causal-LM corpus


def is_data_file(path: Path, formats: dict[str, str]) -> bool:
    try:
        file_format(path, formats)
    except ValueError:
        return False
    return True


def split_from_name(path: Path) -> str | None:
    """`train` / `validation` / `test` from a file name (`train*`, `validation*` / `valid*` / `dev*`, `test*`)."""
    stem = path.name.split(".")[0].lower()
    for prefix, split in SPLIT_ALIASES.items():
        if stem == prefix or stem.startswith((prefix + "_", prefix + "-")):
            return split
    return None


def expand_globs(dataset) -> list[str]:
    """`--dataset` entries with each glob (`shards/*.parquet`) replaced by the files it matches, in name order."""
    import glob

    specs = [dataset] if isinstance(dataset, str) else list(dataset or [])
    return [
        match for spec in specs for match in (sorted(glob.glob(spec)) or [spec] if glob.has_magic(spec) else [spec])
    ]


def local_text_files(specs: Sequence[str]) -> dict[str, list[Path]]:
    formats = {**TEXT_FORMATS, **TABLE_FORMATS}
    files: dict[str, list[Path]] = {}
    for spec in specs:
        path = Path(spec).expanduser()
        if path.is_dir():
            found = [p for p in sorted(p for p in path.iterdir() if p.is_file()) if is_data_file(p, formats)]
            if not found:
                raise FileNotFoundError(f"no text, JSON, Parquet or CSV files in directory {path}")
        else:
            file_format(path, formats)
            found = [path]
        for p in found:
            files.setdefault(split_from_name(p) or "train", []).append(p)
    return files


def damaged_file(dataset) -> Path | None:
    """After a data fault: the first local compressed file of `dataset` (files, folders, globs) that does not
    decompress to its end, found by reading each whole (only done once something failed), or None."""
    specs = expand_globs(dataset)
    if not specs or not all(Path(spec).expanduser().exists() for spec in specs):
        return None
    for paths in local_text_files(specs).values():
        for path in paths:
            if path.suffix.lower() not in COMPRESSION_SUFFIXES:
                continue
            try:
                handle = open_maybe_compressed(path)
                if handle is None:
                    continue
                with handle:
                    while handle.read(1 << 24):
                        pass
            except (OSError, EOFError, ValueError):
                return path
    return None


def data_fault_message(dataset, error: BaseException, when: str = "") -> str:
    """One line for a data fault met while reading `dataset`: the damaged file when one is found, the error, the fix."""
    damaged = damaged_file(dataset)
    where = (
        f"{damaged} is damaged or truncated" if damaged else f"reading {list(dataset) or ['(embedded corpus)']} failed"
    )
    return f"{where}{when} ({type(error).__name__}: {error}); fix or remove the file"
