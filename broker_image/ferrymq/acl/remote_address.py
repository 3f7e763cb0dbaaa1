"""White-list address patterns (upstream RemoteAddressStrategyFactory), as one pure matcher.

Accepted forms (IPv4): ``*`` or ``*.*.*.*`` (everyone), an exact address, and per-segment
patterns: ``192.168.*.*`` / ``192.168.*`` (trailing segments omitted mean any), ``192.168.1.1-5``
(a range), ``192.168.1.{1,5,9}`` (a set). IPv6 addresses match exactly or with ``*`` for the
whole pattern. An empty pattern matches nobody. A malformed pattern raises ValueError when the
file is loaded, so a typo is reported instead of silently refusing or admitting everyone.
"""

from __future__ import annotations

from dataclasses import dataclass


def _segment_ok(segment: str) -> bool:
    if segment == "*":
        return True
    if segment.startswith("{") and segment.endswith("}"):
        parts = segment[1:-1].split(",")
        return bool(parts) and all(_is_octet(p.strip()) for p in parts)
    if "-" in segment:
        low, _, high = segment.partition("-")
        return _is_octet(low) and _is_octet(high) and int(low) <= int(high)
    return _is_octet(segment)


def _is_octet(text: str) -> bool:
    return text.isdigit() and 0 <= int(text) <= 255


def _segment_matches(segment: str, value: str) -> bool:
    if segment == "*":
        return True
    if segment.startswith("{"):
        return value in {p.strip() for p in segment[1:-1].split(",")}
    if "-" in segment:
        low, _, high = segment.partition("-")
        return value.isdigit() and int(low) <= int(value) <= int(high)
    return segment == value


@dataclass(frozen=True, slots=True)
class AddressPattern:
    text: str

    @classmethod
    def parse(cls, text: str) -> AddressPattern:
        text = text.strip()
        if text in ("", "*", "*.*.*.*") or ":" in text:
            return cls(text)
        segments = text.split(".")
        if len(segments) > 4 or not all(_segment_ok(s) for s in segments):
            raise ValueError(f"white remote address {text!r} is not an IPv4 pattern")
        if len(segments) < 4 and segments[-1] != "*":
            raise ValueError(f"white remote address {text!r}: a short pattern must end with '*'")
        return cls(text)

    def matches(self, ip: str) -> bool:
        text = self.text
        if not text:
            return False
        if text in ("*", "*.*.*.*"):
            return True
        if ":" in text or ":" in ip:
            return text == ip
        values = ip.split(".")
        segments = text.split(".")
        if len(values) != 4:
            return False
        for i, value in enumerate(values):
            if i >= len(segments):
                return segments[-1] == "*"
            if not _segment_matches(segments[i], value):
                return False
        return True
