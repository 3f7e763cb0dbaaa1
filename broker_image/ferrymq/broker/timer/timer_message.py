"""Timer messages on put (upstream ``HookUtils.checkIfTimerMessage`` / ``transformTimerMessage``,
``RecallMessageHandle``), pure.

A message with ``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS`` or ``TIMER_DELIVER_MS`` (ms since the epoch)
is due at that time. Due later than now: it is stored in ``rmq_sys_wheel_timer`` queue 0 with
``TIMER_OUT_MS`` (the due time, rounded down to ``timerPrecisionMs``), ``REAL_TOPIC`` and
``REAL_QID``, and the timer service puts it into its topic when due. Due now or earlier: it is
stored in its topic at once. A delay beyond ``timerMaxDelaySec`` or an unparsable value is
refused (WHEEL_TIMER_MSG_ILLEGAL: MESSAGE_ILLEGAL with upstream's remark). A ``DELAY`` level wins
and drops the timer properties, as upstream. Transaction half messages are not rewritten.

The send response of a timer message carries a recall handle: base64url of
``v1 <topic> <brokerName> <TIMER_OUT_MS + 1> <UNIQ_KEY>``. A RECALL_MESSAGE with it stores a
timer message for the same time with ``TIMER_DEL_UNIQKEY = <topic>+<UNIQ_KEY>``, which deletes
the original.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from dataclasses import dataclass

from ferrymq.message import MessageConst, MessageInner, MessageSysFlag, encode_properties
from ferrymq.store.results import PutMessageResult, PutMessageStatus
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX

__all__ = [
    "TIMER_TOPIC",
    "RecallHandle",
    "RecallHandleError",
    "TimerRewrite",
    "build_delete_key",
    "decode_recall_handle",
    "encode_recall_handle",
    "illegal_remark",
]

TIMER_TOPIC = "rmq_sys_wheel_timer"  # upstream TimerMessageStore.TIMER_TOPIC
_TIMER_KEYS = (
    MessageConst.PROPERTY_TIMER_DELIVER_MS,
    MessageConst.PROPERTY_TIMER_DELAY_SEC,
    MessageConst.PROPERTY_TIMER_DELAY_MS,
)


def illegal_remark(max_delay_sec: int) -> str:
    return (
        "timer message illegal, the delay time should not be bigger than the max delay "
        f"{max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than the "
        "current time"
    )


def build_delete_key(real_topic: str, uniq_key: str) -> str:
    """Upstream TimerMessageStore.buildDeleteKey."""
    return f"{real_topic}+{uniq_key}"


class RecallHandleError(ValueError):
    """A recall handle that does not decode (upstream: DecoderException 'recall handle is invalid')."""


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp: str
    message_id: str


def encode_recall_handle(topic: str, broker_name: str, timestamp: str, message_id: str) -> str:
    raw = " ".join(("v1", topic, broker_name, timestamp, message_id))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def decode_recall_handle(handle: str | None) -> RecallHandle:
    if not handle:
        raise RecallHandleError("recall handle is invalid")
    try:
        raw = base64.urlsafe_b64decode(handle.encode()).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise RecallHandleError("recall handle is invalid") from None
    items = raw.split(" ")
    if items[0] != "v1" or len(items) < 5:
        raise RecallHandleError("recall handle is invalid")
    return RecallHandle(items[1], items[2], items[3], items[4])


@dataclass(frozen=True, slots=True)
class TimerRewrite:
    broker_name: str
    enabled: bool = True
    max_delay_sec: int = 3 * 24 * 3600
    precision_ms: int = 1

    def is_timer_message(self, msg: MessageInner) -> bool:
        props = msg.properties
        if msg.topic == TIMER_TOPIC or MessageConst.PROPERTY_TIMER_OUT_MS in props:
            return False
        return any(key in props for key in _TIMER_KEYS)

    def rewrite(
        self, msg: MessageInner, now_ms: int
    ) -> tuple[MessageInner, str | None] | PutMessageResult:
        """``(message to store, recall handle or None)``, or the refusal."""
        tran = MessageSysFlag.get_transaction_value(msg.sys_flag)
        if tran not in (
            MessageSysFlag.TRANSACTION_NOT_TYPE,
            MessageSysFlag.TRANSACTION_COMMIT_TYPE,
        ):
            return msg, None
        props = msg.properties
        level = props.get(MessageConst.PROPERTY_DELAY_TIME_LEVEL)
        if level and level.lstrip("-").isdigit() and int(level) > 0:
            if any(key in props for key in _TIMER_KEYS):
                kept = {k: v for k, v in props.items() if k not in _TIMER_KEYS}
                msg = dataclasses.replace(
                    msg, properties=kept, properties_string=encode_properties(kept)
                )
            return msg, None
        if not self.is_timer_message(msg):
            return msg, None
        if not self.enabled:
            return PutMessageResult(
                PutMessageStatus.WHEEL_TIMER_NOT_ENABLE,
                remark="accurate timer message is not enabled, timerWheelEnable is false",
            )
        try:
            if MessageConst.PROPERTY_TIMER_DELAY_SEC in props:
                deliver = now_ms + int(props[MessageConst.PROPERTY_TIMER_DELAY_SEC]) * 1000
            elif MessageConst.PROPERTY_TIMER_DELAY_MS in props:
                deliver = now_ms + int(props[MessageConst.PROPERTY_TIMER_DELAY_MS])
            else:
                deliver = int(props[MessageConst.PROPERTY_TIMER_DELIVER_MS])
        except ValueError:
            return self._illegal()
        if deliver <= now_ms:
            if MessageConst.PROPERTY_TIMER_DEL_UNIQKEY in props:
                return self._illegal()
            return msg, None  # due already: stored in its topic now
        if deliver - now_ms > self.max_delay_sec * 1000:
            return self._illegal()
        precision = self.precision_ms
        if precision > 1:
            deliver = (
                deliver - precision
                if deliver % precision == 0
                else deliver // precision * precision
            )
        new = dict(props)
        new[MessageConst.PROPERTY_TIMER_OUT_MS] = str(deliver)
        new[MessageConst.PROPERTY_REAL_TOPIC] = msg.topic
        new[MessageConst.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        stored = dataclasses.replace(
            msg,
            topic=TIMER_TOPIC,
            queue_id=0,
            properties=new,
            properties_string=encode_properties(new),
        )
        uniq = props.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        handle = None
        if (
            uniq
            and not msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
            and MessageConst.PROPERTY_TIMER_DEL_UNIQKEY not in props
        ):
            handle = encode_recall_handle(msg.topic, self.broker_name, str(deliver + 1), uniq)
        return stored, handle

    def _illegal(self) -> PutMessageResult:
        return PutMessageResult(
            PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL, remark=illegal_remark(self.max_delay_sec)
        )
