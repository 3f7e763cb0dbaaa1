"""The ``semantics`` part of ``broker.conf``: transaction checks and the offset flush, with
upstream BrokerConfig names (``transactionCheckInterval``, ``transactionTimeOut``,
``transactionCheckMax``, ``flushDelayOffsetInterval``). A leaf: loading configuration does not
import the services that use it (:mod:`ferrymq.broker.semantics`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = ["SemanticsConfig"]


class SemanticsConfig(BaseModel):
    """Semantics settings with upstream broker.conf names (milliseconds as upstream)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    transaction_check_interval: int = Field(default=60_000, ge=10, description="ms")
    transaction_time_out: int = Field(default=6_000, ge=0, description="ms")
    transaction_check_max: int = Field(default=15, ge=1)
    flush_delay_offset_interval: int = Field(default=10_000, ge=10, description="ms")
