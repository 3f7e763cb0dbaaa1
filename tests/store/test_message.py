"""The shared message model: properties codec, msgId, batch body codec, Java hash."""

from __future__ import annotations

import pytest
from ferrymq.message import (
    Message,
    MessageDecodeError,
    MessageSysFlag,
    create_message_id,
    decode_batch,
    decode_message_id,
    decode_properties,
    encode_batch,
    encode_properties,
    java_string_hash,
    property_value,
    tags_string_to_tags_code,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# Property names/values never contain the two separators.
_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=30,
)
_props = st.dictionaries(_text.filter(bool), _text, max_size=8)


@settings(deadline=None)  # a shared, loaded machine: no per-example deadline
@given(_props)
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props
    assert decode_properties(encode_properties(props).encode("utf-8")) == props


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="\x01\x02KEYSTAGx", max_size=40), st.sampled_from(["KEYS", "TAGS", "K"]))
def test_property_value_reads_what_decode_keeps(text: str, name: str) -> None:
    """The reput's lookup agrees with the full parse on any text: duplicates (last wins),
    items without a separator, values holding the name separator, no trailing separator."""
    assert property_value(text, name) == decode_properties(text).get(name)


def test_properties_lenient_parse() -> None:
    # No trailing separator, an item without a value separator, an empty name: tolerated.
    assert decode_properties("A\x01a\x02junk\x02\x01x\x02B\x01b") == {"A": "a", "B": "b"}
    assert decode_properties("") == {}


def test_java_string_hash_known_values() -> None:
    # Values computed by Java's String.hashCode.
    assert java_string_hash("") == 0
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("hello world") == 1794106052
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("\u4e2d\u6587") == 646394
    # U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00.
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00 == 1772899
    assert tags_string_to_tags_code(None) == 0
    assert tags_string_to_tags_code("TagA") == 2598919


@settings(deadline=None)  # a shared, loaded machine: no per-example deadline
@given(st.ip_addresses(v=4), st.integers(0, 65535), st.integers(0, 2**63 - 1))
def test_msg_id_round_trip(ip: object, port: int, offset: int) -> None:
    msg_id = create_message_id((str(ip), port), offset)
    assert len(msg_id) == 32 and msg_id == msg_id.upper()
    assert decode_message_id(msg_id) == (str(ip), port, offset)


def test_msg_id_layout_and_errors() -> None:
    assert create_message_id(("10.0.0.1", 10911), 4) == "0A00000100002A9F0000000000000004"
    with pytest.raises(MessageDecodeError):
        decode_message_id("XYZ")
    with pytest.raises(MessageDecodeError):
        decode_message_id("0A000001")


_messages = st.lists(
    st.builds(
        Message,
        topic=st.just("T"),
        body=st.binary(max_size=200),
        flag=st.integers(-(2**31), 2**31 - 1),
        properties=_props,
    ),
    min_size=1,
    max_size=10,
)


@settings(deadline=None)  # a shared, loaded machine: no per-example deadline
@given(_messages)
def test_batch_round_trip(messages: list[Message]) -> None:
    decoded = decode_batch(encode_batch(messages), "T")
    assert [(m.body, m.flag, m.properties) for m in decoded] == [
        (m.body, m.flag, m.properties) for m in messages
    ]


@settings(deadline=None)  # a shared, loaded machine: no per-example deadline
@given(_messages, st.data())
def test_batch_truncated_is_an_error(messages: list[Message], data: st.DataObject) -> None:
    body = encode_batch(messages)
    cut = data.draw(st.integers(1, len(body) - 1))
    # Either the prefix is a whole number of items (valid) or decoding raises: never garbage.
    try:
        decoded = decode_batch(body[:cut], "T")
    except MessageDecodeError:
        return
    assert [m.body for m in decoded] == [m.body for m in messages[: len(decoded)]]


def test_sys_flag_transaction_bits() -> None:
    flag = MessageSysFlag.COMPRESSED_FLAG | MessageSysFlag.TRANSACTION_PREPARED_TYPE
    assert MessageSysFlag.get_transaction_value(flag) == MessageSysFlag.TRANSACTION_PREPARED_TYPE
    flag = MessageSysFlag.reset_transaction_value(flag, MessageSysFlag.TRANSACTION_COMMIT_TYPE)
    assert MessageSysFlag.get_transaction_value(flag) == MessageSysFlag.TRANSACTION_COMMIT_TYPE
    assert flag & MessageSysFlag.COMPRESSED_FLAG


def test_message_accessors() -> None:
    m = Message("T", b"x")
    m.tags = "TagA"
    m.keys = ["k1", "k2"]
    m.delay_time_level = 3
    assert m.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "DELAY": "3"}
    assert m.keys == ["k1", "k2"] and m.delay_time_level == 3 and m.wait_store_msg_ok
    m.properties["WAIT"] = "false"
    assert not m.wait_store_msg_ok
