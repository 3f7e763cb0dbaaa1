"""Option parsing shared by the store data sources (options arrive as case-insensitive strings)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


class SourceOptionError(ValueError):
    """A data source option is missing or invalid; the message names the option."""


def store_subdir(options: Mapping[str, str], subdir: str, fmt: str) -> Path:
    """The directory to scan: ``path`` itself, or ``path/<subdir>`` when given the store root."""
    raw = options.get("path")
    if not raw:
        raise SourceOptionError(f"{fmt}: no path; use spark.read.format({fmt!r}).load(store_dir)")
    root = Path(raw)
    if (root / subdir).is_dir():
        return root / subdir
    if root.is_dir():
        return root
    raise SourceOptionError(f"{fmt}: path {raw!r} is not a directory")


def int_option(options: Mapping[str, str], key: str, default: int, minimum: int = 1) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SourceOptionError(f"option {key}={raw!r} is not an integer") from None
    if value < minimum:
        raise SourceOptionError(f"option {key}={value} must be >= {minimum}")
    return value


def bool_option(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise SourceOptionError(f"option {key}={raw!r} is not a boolean (true/false)")


def choice_option(
    options: Mapping[str, str], key: str, default: str, choices: tuple[str, ...]
) -> str:
    raw = options.get(key)
    if raw is None:
        return default
    if raw.lower() not in choices:
        raise SourceOptionError(f"option {key}={raw!r}; expected one of {', '.join(choices)}")
    return raw.lower()


def numbered_files(directory: Path) -> list[tuple[int, Path]]:
    """Files named by their start offset (20 digits upstream), ordered by that offset.

    Other names (``.tmp`` files, editor droppings) are ignored, as the broker ignores them.
    """
    out = []
    for p in directory.iterdir():
        if p.is_file() and p.name.isdigit():
            out.append((int(p.name), p))
    return sorted(out)
