"""SubscriptionGroupManager: consumer group settings (subscriptionGroup.json), auto-created on first
use when autoCreateSubscriptionGroup (upstream SubscriptionGroupManager)."""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

import orjson

from ferrymq.mixall import TOOLS_CONSUMER_GROUP
from ferrymq.remoting.bodies import (
    BodyError,
    DataVersion,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
)
from ferrymq.remoting.codes import ResponseCode

log = logging.getLogger(__name__)

# groups upstream creates at start-up (tools, filter servers, self test)
SYSTEM_GROUPS = (
    TOOLS_CONSUMER_GROUP,
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
)


class Refusal(NamedTuple):
    """A request refused: the response code and its remark."""

    code: int
    remark: str


class SubscriptionGroupManager:
    def __init__(self, *, auto_create: bool) -> None:
        self.auto_create = auto_create
        self.table: dict[str, SubscriptionGroupConfig] = {
            name: SubscriptionGroupConfig(group_name=name) for name in SYSTEM_GROUPS
        }
        self.data_version = DataVersion(timestamp=int(time.time() * 1000))
        self.dirty = False

    def consumable(self, group: str) -> SubscriptionGroupConfig | Refusal:
        """The group's config when it may pull or pop, else why not (code and remark as
        upstream's PullMessageProcessor and PopMessageProcessor answer)."""
        config = self.find(group)
        if config is None:
            return Refusal(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{group}] does not exist",
            )
        if not config.consume_enable:
            return Refusal(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        return config

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults when unknown and auto-creation is on."""
        config = self.table.get(group)
        if config is None and self.auto_create:
            config = SubscriptionGroupConfig(group_name=group)
            self.table[group] = config
            self._bump()
            log.info("subscription group %s auto-created", group)
        return config

    def update(self, config: SubscriptionGroupConfig) -> None:
        self.table[config.group_name] = config
        self._bump()

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self._bump()
        return True

    def _bump(self) -> None:
        self.data_version = DataVersion(
            timestamp=int(time.time() * 1000), counter=self.data_version.counter + 1
        )
        self.dirty = True

    def wrapper(self) -> SubscriptionGroupWrapper:
        return SubscriptionGroupWrapper(
            subscription_group_table={k: v.model_copy() for k, v in self.table.items()},
            data_version=self.data_version.model_copy(),
        )

    def snapshot(self) -> bytes:
        return orjson.dumps(self.wrapper().to_json_obj(), option=orjson.OPT_INDENT_2)

    def restore(self, data: bytes) -> None:
        try:
            wrapper = SubscriptionGroupWrapper.decode(data)
        except BodyError as exc:
            raise ValueError(f"subscriptionGroup.json unreadable: {exc}") from None
        self.table.update(wrapper.subscription_group_table)
        self.data_version = wrapper.data_version
