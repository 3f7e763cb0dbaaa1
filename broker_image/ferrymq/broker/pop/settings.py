"""POP and timer-message settings with upstream's broker.conf names (BrokerConfig and
MessageStoreConfig keys), read like the broker's other parts (:mod:`ferrymq.broker.broker_conf`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = ["PopTimerSettings"]


class PopTimerSettings(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    revive_queue_num: int = Field(default=8, ge=1, le=64)
    """Queues of the revive topic ``rmq_sys_REVIVE_LOG_<cluster>`` (POP checkpoints and acks)."""
    enable_retry_topic_v2: bool = False
    """POP retry topic ``%RETRY%<group>+<topic>`` instead of ``%RETRY%<group>_<topic>``."""
    pop_from_retry_probability: int = Field(default=20, ge=0, le=100)
    """Percent of pops that read the POP retry topic first."""
    default_message_request_mode: Literal["PULL", "POP"] = "PULL"
    """QUERY_ASSIGNMENT's mode for a (topic, group) nobody set with SET_MESSAGE_REQUEST_MODE."""
    default_pop_share_queue_num: int = -1
    init_pop_offset_by_check_msg_in_mem: bool = True
    """A group's first pop of a queue that still starts at 0 with message 0 in memory begins
    at 0 (upstream initPopOffsetByCheckMsgInMem); otherwise at the last message."""
    timer_wheel_enable: bool = True
    """Timer messages (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS); off: refused."""
    timer_max_delay_sec: int = Field(default=3 * 24 * 3600, ge=1)
    """The longest delay a timer message may ask for (upstream default: 3 days)."""
    timer_precision_ms: int = Field(default=1, ge=1, le=60_000)
    """Delivery times are rounded down to this (upstream: 1000; ferrymq delivers to the ms)."""
    recall_message_enable: bool = False
    """RECALL_MESSAGE (370) allowed (upstream's default: false)."""
