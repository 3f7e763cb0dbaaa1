"""The SEND_MESSAGE_V2 header fast path reads exactly what the generic lenient parser reads."""

from __future__ import annotations

import pytest
from ferrymq.remoting.headers import HeaderError, SendMessageRequestHeader
from hypothesis import given, settings
from hypothesis import strategies as st

INTS = st.one_of(
    st.integers(-(2**40), 2**40).map(str),
    st.sampled_from(["", " 7 ", "12.0", "1.5", "x", "+3", "1_000", "-0"]),
)
BOOLS = st.sampled_from(["", "true", "false", "TRUE", "False", "1", "0", "yes", "no", "maybe"])
STRS = st.one_of(st.text(max_size=12), st.just(""))


def generic(ext: dict[str, str]) -> SendMessageRequestHeader:
    return SendMessageRequestHeader._from_specs(SendMessageRequestHeader._v2_specs(), ext)


def outcome(parse: object, ext: dict[str, str]) -> object:
    try:
        return parse(ext)  # type: ignore[operator]
    except HeaderError as exc:
        return ("error", str(exc))


@settings(max_examples=400, deadline=None)
@given(
    st.fixed_dictionaries(
        {"b": STRS},
        optional={
            "a": STRS,
            "c": STRS,
            "d": INTS,
            "e": INTS,
            "f": INTS,
            "g": INTS,
            "h": INTS,
            "i": STRS,
            "j": INTS,
            "k": BOOLS,
            "l": INTS,
            "m": BOOLS,
        },
    )
)
def test_fast_path_equals_generic_parser(ext: dict[str, str]) -> None:
    assert outcome(SendMessageRequestHeader.from_ext, ext) == outcome(generic, ext)


def test_typical_v2_header_round_trips() -> None:
    header = SendMessageRequestHeader(
        producer_group="pg",
        topic="T",
        queue_id=3,
        sys_flag=1,
        born_timestamp=1_700_000_000_000,
        flag=5,
        properties="UNIQ_KEY\x01A\x02",
        reconsume_times=2,
        unit_mode=False,
        batch=True,
        max_reconsume_times=16,
    )
    ext = header.to_ext_v2()
    assert SendMessageRequestHeader._from_v2_plain(ext) == header
    assert SendMessageRequestHeader.from_ext(ext) == header


def test_missing_topic_is_named() -> None:
    with pytest.raises(HeaderError, match="b \\(topic\\)"):
        SendMessageRequestHeader.from_ext({"a": "pg", "b": ""})
