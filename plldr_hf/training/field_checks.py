"""The check of one run-options field: its value against the field's type annotation (transformers' fields too), the
range of its `min` metadata and its `choices`, numbers finite; the message names the flag (`flag_of`), so the
command line and the Python API refuse a value with the same line."""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import types
import typing


__all__ = ["check_value", "flag_of"]


def flag_of(spec: dataclasses.Field) -> str:
    """The flag every message names a field by: its first alias, else `--field-name` (the field's own name where it
    is no flag)."""
    if spec.metadata.get("cli", True) is False:
        return spec.name
    aliases = spec.metadata.get("aliases")
    return aliases[0] if aliases else "--" + spec.name.replace("_", "-")


_KIND = {int: "an integer", float: "a finite number", bool: "true or false", str: "text"}


def _conforms(value, hint) -> bool:
    """Whether `value` is of the type `hint` (booleans are not numbers; lists and dicts by their items)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return True
    if hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in args
    if hint is bool:
        return isinstance(value, bool)
    if hint in (int, float):
        return isinstance(value, (int, float) if hint is float else int) and not isinstance(value, bool)
    if origin in (list, tuple) or hint in (list, tuple):
        return isinstance(value, (list, tuple)) and all(_conforms(item, args[0]) for item in value) if args else True
    if origin is dict or hint is dict:
        return isinstance(value, dict) or dataclasses.is_dataclass(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, hint) or value in {member.value for member in hint}
    return isinstance(hint, type) and isinstance(value, hint)


def _non_finite(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(_non_finite(item) for item in value)
    if isinstance(value, dict):
        return any(_non_finite(item) for item in value.values())
    return False


def check_value(spec: dataclasses.Field, hint, value):
    """One field's value checked (and normalised: a path becomes text, one name a list of one), or a ValueError
    naming its flag: the type of its annotation, the range of its `min`, its `choices`, finite numbers."""
    flag = flag_of(spec)
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    bare = [arg for arg in typing.get_args(hint) if arg is not type(None)] if union else [hint]
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if list[str] in bare and isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)) and list[str] in bare:
        value = [os.fspath(item) if isinstance(item, os.PathLike) else item for item in value]
    if float in bare and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if _non_finite(value):
        raise ValueError(f"{flag} {value}: numbers must be finite (not NaN or infinite)")
    low = spec.metadata.get("min")
    named = [arg for arg in bare if isinstance(arg, type) and issubclass(arg, enum.Enum)]
    choices = spec.metadata.get("choices") or (tuple(member.value for member in named[0]) if named else None)
    if not _conforms(value, hint):
        if list[str] in bare:
            raise ValueError(f"{flag}: must be a list of names or paths, got {value!r}")
        kinds = [_KIND.get(arg, getattr(arg, "__name__", str(arg))) for arg in bare]
        if int in bare and low is not None:
            kinds = ["a positive integer" if low == 1 else "a non-negative integer"]
        if float in bare and low is not None:
            kinds = ["a finite non-negative number" if low in ("non_negative", "unit") else "a finite positive number"]
        raise ValueError(f"{flag}: must be {' or '.join(dict.fromkeys(kinds))}, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and low is not None:
        kind = {1: "a positive integer", 0: "a non-negative integer"}[low] if isinstance(value, int) else None
        if kind and value < low:
            raise ValueError(f"{flag}: must be {kind}, got {value!r}")
        if isinstance(value, float) and ((low == 0 and not value > 0) or (low != 0 and value < 0)):
            kind = "a finite positive number" if low == 0 else "a finite non-negative number"
            raise ValueError(f"{flag}: must be {kind}, got {value:g}")
        if low == "unit" and value >= 1:
            raise ValueError(f"{flag}: must be in [0, 1), got {value:g}")
    if choices is not None and value is not None and value not in choices:
        raise ValueError(f"{flag}: must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value
