"""Broker administration: UPDATE_BROKER_CONFIG (25), GET_BROKER_CONFIG (26),
GET_BROKER_RUNTIME_INFO (28), WIPE_WRITE_PERM_OF_BROKER (205), ADD_WRITE_PERM_OF_BROKER (327)."""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections.abc import Callable
from typing import Any

import javaproperties
import orjson
from pydantic import BaseModel, ValidationError

from ferrymq.broker.config import BrokerConfig, persist_properties, property_value
from ferrymq.broker.processors.common import guarded, guarded_async
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.remoting.bodies import PERM_WRITE, DataVersion, KVTable
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer

log = logging.getLogger(__name__)

BROKER_VERSION = 399  # MQVersion of the 4.9 line, as the remoting layer reports
BROKER_VERSION_DESC = "V4_9_4"

# settings that can change without a restart (the rest need one: ports, names, paths)
RUNTIME_UPDATABLE = frozenset(
    {
        "brokerPermission",
        "autoCreateTopicEnable",
        "autoCreateSubscriptionGroup",
        "defaultTopicQueueNums",
        "longPollingEnable",
        "shortPollingTimeMills",
        "notifyConsumerIdsChangedEnable",
        "enablePropertyFilter",
        "slaveReadEnable",
        "rejectTransactionMessage",
        "namesrvAddr",
        "registerNameServerPeriod",
    }
)


def properties_text(*models: BaseModel) -> str:
    """Upstream-spelled ``key=value`` lines of every setting (GET_BROKER_CONFIG body)."""
    props: dict[str, str] = {}
    for model in models:
        for name, value in model.model_dump(by_alias=True, mode="json").items():
            if value is None:
                continue
            props[name] = property_value(value)
    out = io.StringIO()
    javaproperties.dump(props, out, timestamp=False)
    return out.getvalue()


def plan_runtime_update(config: BrokerConfig, text: str) -> dict[str, Any]:
    """Pure: validate ``key=value`` lines against ``config``; returns {field name: new value} for
    every key given (changed or not).

    Raises ValueError naming the key on an unknown/immutable key or a bad value.
    """
    props = javaproperties.loads(text)
    fields_by_alias = {
        (info.alias or name): name for name, info in BrokerConfig.model_fields.items()
    }
    updates: dict[str, Any] = {}
    for key, value in props.items():
        if key not in fields_by_alias:
            raise ValueError(f"unknown broker config key '{key}'")
        if key not in RUNTIME_UPDATABLE:
            raise ValueError(f"broker config key '{key}' cannot change at runtime; restart needed")
        updates[key] = value
    try:
        # validated by upstream (alias) names, so an error names the key the admin typed
        candidate = config.model_validate({**config.model_dump(by_alias=True), **updates})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err.get("loc", ()))
        raise ValueError(f"broker config key '{key}': {err.get('msg')}") from None
    return {fields_by_alias[k]: getattr(candidate, fields_by_alias[k]) for k in updates}


def apply_runtime_update(config: BrokerConfig, text: str) -> list[str]:
    """Validate and apply ``key=value`` lines to ``config``; returns the changed field names.

    Raises ValueError naming the key on an unknown/immutable key or a bad value; applies nothing then.
    """
    changed = []
    for name, new in plan_runtime_update(config, text).items():
        if getattr(config, name) != new:
            setattr(config, name, new)
            changed.append(name)
    return changed


class AdminBrokerProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStorePort,
        *,
        store_config: BaseModel | None = None,
        runtime_stats: Callable[[], dict[str, str]] = dict,
        on_config_changed: Callable[[list[str]], None] = lambda keys: None,
    ) -> None:
        self.config = config
        self.store = store
        self.store_config = store_config
        self.runtime_stats = runtime_stats
        self.on_config_changed = on_config_changed
        self.boot_timestamp = int(time.time() * 1000)
        self.data_version = DataVersion(timestamp=self.boot_timestamp)
        # one read-modify-write of broker.conf at a time, in the order the updates were applied
        self._persist_lock = asyncio.Lock()

    def register_to(self, server: RemotingServer) -> None:
        server.register(RequestCode.UPDATE_BROKER_CONFIG, guarded_async(self.update_config))
        server.register(RequestCode.GET_BROKER_CONFIG, guarded(self.get_config))
        server.register(RequestCode.GET_BROKER_RUNTIME_INFO, guarded(self.runtime_info))
        server.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER, guarded(self.wipe_write_perm))
        server.register(RequestCode.ADD_WRITE_PERM_OF_BROKER, guarded(self.add_write_perm))

    async def update_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            text = request.body_bytes().decode("utf-8")
            planned = plan_runtime_update(self.config, text)
        except (ValueError, UnicodeDecodeError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        changed = []
        for name, new in planned.items():
            if getattr(self.config, name) != new:
                setattr(self.config, name, new)
                changed.append(name)
        if changed:
            self.data_version = DataVersion(
                timestamp=int(time.time() * 1000), counter=self.data_version.counter + 1
            )
            log.info("broker config updated by %s: %s", channel.remote_addr, changed)
            self.on_config_changed(changed)
        remark = await self._persist(list(planned)) if planned else None
        return request.response(ResponseCode.SUCCESS, remark)

    async def _persist(self, names: list[str]) -> str | None:
        """Write the current values of ``names`` into the broker.conf the broker started from, so
        they hold after a restart; None when done, else why not (the update stays applied in
        memory, as upstream Configuration.persist only logs a failed write)."""
        path = self.config.broker_config_path
        if path is None:
            return None  # started without -c: nothing to rewrite, the change lasts until restart
        fields = BrokerConfig.model_fields
        values = {(fields[n].alias or n): property_value(getattr(self.config, n)) for n in names}
        async with self._persist_lock:
            try:
                await asyncio.to_thread(persist_properties, path, values)
            except OSError as exc:
                # e.g. a read-only ConfigMap mount: the operator owns that file
                log.warning("broker config applied but not persisted to %s: %s", path, exc)
                return f"applied, but not persisted to {path}: {exc}"
        log.info("broker config persisted to %s: %s", path, sorted(values))
        return None

    def get_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        models: list[BaseModel] = [self.config]
        if self.store_config is not None:
            models.append(self.store_config)
        body = properties_text(*models).encode("utf-8")
        version = orjson.dumps(self.data_version.to_json_obj()).decode()
        return request.response(ResponseCode.SUCCESS, None, {"version": version}, body)

    def runtime_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        table = {
            "brokerVersion": str(BROKER_VERSION),
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "bootTimestamp": str(self.boot_timestamp),
            "brokerPermission": str(self.config.broker_permission),
        }
        table.update(self.store.runtime_info())
        table.update(self.runtime_stats())
        return request.response(ResponseCode.SUCCESS, None, None, KVTable(table=table).encode())

    def _set_write(self, request: RemotingCommand, writable: bool) -> RemotingCommand:
        perm = self.config.broker_permission
        new = (perm | PERM_WRITE) if writable else (perm & ~PERM_WRITE)
        count_key = "addTopicCount" if writable else "wipeTopicCount"
        if new != perm:
            self.config.broker_permission = new
            log.warning("broker write permission %s", "restored" if writable else "wiped")
            self.on_config_changed(["broker_permission"])
        return request.response(ResponseCode.SUCCESS, None, {count_key: 1 if new != perm else 0})

    def wipe_write_perm(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return self._set_write(request, writable=False)

    def add_write_perm(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return self._set_write(request, writable=True)
