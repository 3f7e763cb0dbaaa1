"""JSON the way upstream's fastjson writes and reads bodies.

fastjson writes maps whose keys are objects (``Map<MessageQueue, OffsetWrapper>`` in ConsumeStats) with
the key as a bare JSON object: ``{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}``, and integer keys
unquoted (``{0:"127.0.0.1:10911"}``). Upstream tools parse that form, so ``dumps`` writes it for such
keys; ``loads`` accepts it (plain JSON goes through orjson first, the lenient parser only on failure).
Object keys are returned as ``ObjectKey`` (a hashable, ordered view of the key's fields).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import orjson


class ObjectKey(tuple[tuple[str, Any], ...]):
    """A map key that was a JSON object: hashable, with ``get`` and ``as_dict`` for reading fields."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self)

    def get(self, name: str, default: Any = None) -> Any:
        for key, value in self:
            if key == name:
                return value
        return default

    @classmethod
    def of(cls, mapping: Mapping[str, Any]) -> ObjectKey:
        return cls(tuple(sorted(mapping.items())))


def dumps(obj: Any) -> bytes:
    """Serialise like fastjson; falls back to orjson when no map has a non-string key."""
    if not _has_special_keys(obj):
        return orjson.dumps(obj, default=_default)
    return "".join(_write(obj)).encode()


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def _has_special_keys(obj: Any) -> bool:
    if isinstance(obj, dict):
        return any(not isinstance(k, str) for k in obj) or any(
            _has_special_keys(v) for v in obj.values()
        )
    if isinstance(obj, (list, tuple)) and not isinstance(obj, ObjectKey):
        return any(_has_special_keys(v) for v in obj)
    return False


def _write(obj: Any) -> Iterator[str]:
    if isinstance(obj, ObjectKey):
        yield from _write(obj.as_dict())
    elif isinstance(obj, dict):
        yield "{"
        first = True
        for key, value in obj.items():
            if not first:
                yield ","
            first = False
            if isinstance(key, str):
                yield orjson.dumps(key).decode()
            elif isinstance(key, bool):
                yield orjson.dumps(str(key).lower()).decode()
            elif isinstance(key, int):
                yield str(key)
            else:
                yield from _write(key)
            yield ":"
            yield from _write(value)
        yield "}"
    elif isinstance(obj, (list, tuple)):
        yield "["
        for i, value in enumerate(obj):
            if i:
                yield ","
            yield from _write(value)
        yield "]"
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        yield from _write(dataclasses.asdict(obj))
    else:
        yield orjson.dumps(obj, default=_default).decode()


class FastjsonError(ValueError):
    pass


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    raw = bytes(data) if not isinstance(data, str) else data.encode()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    parser = _Parser(raw.decode("utf-8", errors="replace"))
    value = parser.value()
    parser.skip_ws()
    if parser.pos != len(parser.text):
        raise FastjsonError(f"trailing data at offset {parser.pos}")
    return value


class _Parser:
    """Recursive-descent JSON with fastjson's extensions: object/number keys, single quotes, bare words."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip_ws(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        self.pos = pos

    def value(self) -> Any:
        self.skip_ws()
        if self.pos >= len(self.text):
            raise FastjsonError("unexpected end of input")
        ch = self.text[self.pos]
        if ch == "{":
            return self.obj()
        if ch == "[":
            return self.arr()
        if ch in "\"'":
            return self.string()
        return self.scalar()

    def obj(self) -> dict[Any, Any]:
        self.pos += 1
        out: dict[Any, Any] = {}
        self.skip_ws()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            self.skip_ws()
            key = self.value()
            if isinstance(key, dict):
                key = ObjectKey.of(key)
            elif isinstance(key, list):
                key = tuple(key)
            self.skip_ws()
            if not self.text.startswith(":", self.pos):
                raise FastjsonError(f"expected ':' at offset {self.pos}")
            self.pos += 1
            out[key] = self.value()
            self.skip_ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("}", self.pos):
                self.pos += 1
                return out
            raise FastjsonError(f"expected ',' or '}}' at offset {self.pos}")

    def arr(self) -> list[Any]:
        self.pos += 1
        out: list[Any] = []
        self.skip_ws()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self.skip_ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return out
            raise FastjsonError(f"expected ',' or ']' at offset {self.pos}")

    def string(self) -> str:
        quote = self.text[self.pos]
        start = self.pos
        pos = self.pos + 1
        text = self.text
        while pos < len(text):
            ch = text[pos]
            if ch == "\\":
                pos += 2
                continue
            if ch == quote:
                literal = text[start : pos + 1]
                self.pos = pos + 1
                if quote == "'":
                    literal = '"' + literal[1:-1].replace('"', '\\"') + '"'
                try:
                    result: str = orjson.loads(literal)
                except orjson.JSONDecodeError as exc:
                    raise FastjsonError(f"bad string at offset {start}: {exc}") from None
                return result
            pos += 1
        raise FastjsonError(f"unterminated string at offset {start}")

    def scalar(self) -> Any:
        text = self.text
        start = self.pos
        pos = start
        while pos < len(text) and text[pos] not in ",:}] \t\r\n":
            pos += 1
        word = text[start:pos]
        self.pos = pos
        if not word:
            raise FastjsonError(f"unexpected character {text[start]!r} at offset {start}")
        try:
            return orjson.loads(word)
        except orjson.JSONDecodeError:
            return word  # fastjson accepts bare identifiers as strings
