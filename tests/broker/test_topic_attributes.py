"""Topic attributes (upstream RocketMQ 5 ``+key=value`` / ``-key``): parsing and the alter rules."""

from __future__ import annotations

import pytest
from ferrymq.broker import topic_attributes as ta


def test_parse_and_alter() -> None:
    ops = ta.parse_operations("+message.type=FIFO")
    assert ops == {"message.type": "FIFO"}
    assert ta.alter({}, ops, create=True) == {"message.type": "FIFO"}
    assert (
        ta.alter({"message.type": "FIFO"}, ta.parse_operations("-message.type"), create=False) == {}
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("message.type=FIFO", r"must start with \+"),
        ("+message.type", r"\+key=value"),
        ("-message.type=FIFO", "-key"),
        ("+a=1,+a=2", "given twice"),
    ],
)
def test_malformed_operations_are_refused(text: str, words: str) -> None:
    with pytest.raises(ta.AttributeRefused, match=words):
        ta.parse_operations(text)


def test_unknown_keys_values_and_removals_are_refused() -> None:
    with pytest.raises(ta.AttributeRefused, match="unsupported topic attribute"):
        ta.alter({}, {"retention.ms": "1"}, create=True)
    with pytest.raises(ta.AttributeRefused, match="not one of"):
        ta.alter({}, {"message.type": "URGENT"}, create=True)
    with pytest.raises(ta.AttributeRefused, match="being created"):
        ta.alter({}, {"message.type": None}, create=True)
    with pytest.raises(ta.AttributeRefused, match="not set"):
        ta.alter({}, {"message.type": None}, create=False)


def test_operations_text_reaches_exactly_the_desired_attributes() -> None:
    current = {"message.type": "FIFO"}
    assert ta.operations_text(current, {"message.type": "NORMAL"}) == "+message.type=NORMAL"
    assert ta.operations_text(current, {}) == "-message.type"
    assert ta.operations_text(current, current) == ""
    text = ta.operations_text(current, {"message.type": "DELAY"})
    assert ta.alter(current, ta.parse_operations(text), create=False) == {"message.type": "DELAY"}
