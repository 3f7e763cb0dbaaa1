"""Broker administration: UPDATE_BROKER_CONFIG (25), GET_BROKER_CONFIG (26),
GET_BROKER_RUNTIME_INFO (28), WIPE_WRITE_PERM_OF_BROKER (205), ADD_WRITE_PERM_OF_BROKER (327)."""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import javaproperties
import orjson
from pydantic import BaseModel, ValidationError

from ferrymq import upstream_config
from ferrymq.broker.config import BrokerConfig, persist_properties, property_value
from ferrymq.broker.processors.common import guarded, guarded_async
from ferrymq.broker.store_port import MessageStorePort
from ferrymq.remoting.bodies import PERM_WRITE, DataVersion, KVTable
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import DEFAULT_VERSION, DEFAULT_VERSION_DESC, RemotingCommand
from ferrymq.remoting.server import RemotingServer
from ferrymq.upstream_config import BROKER_DEFAULTS

log = logging.getLogger(__name__)

BROKER_VERSION = DEFAULT_VERSION  # as the remoting layer reports
BROKER_VERSION_DESC = DEFAULT_VERSION_DESC

# upstream BrokerConfig.configBlackList: an update naming one is refused whole
CONFIG_BLACK_LIST = frozenset({"configBlackList", "brokerConfigPath"})

# settings ferrymq applies at once (the other keys its models have take effect at the next start;
# the store reads its cleanup settings on every turn and the flushers are told of a change)
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
        "flushIntervalCommitLog",
        "flushCommitLogLeastPages",
        "flushCommitLogThoroughInterval",
        "flushIntervalConsumeQueue",
        "flushConsumeQueueLeastPages",
        "flushConsumeQueueThoroughInterval",
        "fileReservedTime",
        "deleteWhen",
        "diskMaxUsedSpaceRatio",
        "cleanResourceInterval",
        "cleanFileForciblyEnable",
    }
)


def properties_text(values: dict[str, str]) -> str:
    """``key=value`` lines (GET_BROKER_CONFIG / GET_NAMESRV_CONFIG body)."""
    out = io.StringIO()
    javaproperties.dump(values, out, timestamp=False)
    return out.getvalue()


def config_report(
    models: Sequence[BaseModel], kept: dict[str, str], defaults: Mapping[str, str] = BROKER_DEFAULTS
) -> str:
    """What GET_BROKER_CONFIG answers: upstream's keys and defaults, the values ferrymq runs with
    and the kept values (see :mod:`ferrymq.upstream_config`)."""
    return properties_text(upstream_config.report(defaults, models, kept))


class BlackListed(ValueError):
    """An update names a key of upstream's configBlackList."""


@dataclass
class UpdatePlan:
    """What an UPDATE_BROKER_CONFIG does, key by key (upstream key names)."""

    # applied now: (index of the model, field name) -> validated value
    apply: dict[tuple[int, str], Any] = field(default_factory=dict)
    # keys a model has that take effect at the next start: persisted only
    at_restart: dict[str, str] = field(default_factory=dict)
    # keys only upstream has: kept, persisted and reported, not acted on
    kept: dict[str, str] = field(default_factory=dict)
    # keys nobody knows: ignored, as upstream's Configuration.update ignores them
    ignored: list[str] = field(default_factory=list)

    def persisted(self, models: Sequence[BaseModel]) -> dict[str, str]:
        """key -> value to write into broker.conf."""
        out = dict(self.at_restart)
        out.update(self.kept)
        for (i, name), value in self.apply.items():
            info = type(models[i]).model_fields[name]
            out[info.alias or name] = property_value(value)
        return out


def _field_of(models: Sequence[BaseModel], key: str) -> tuple[int, str] | None:
    for i, model in enumerate(models):
        for name, info in type(model).model_fields.items():
            if (info.alias or name) == key and not info.exclude:
                return i, name
    return None


def plan_update(
    models: Sequence[BaseModel], text: str, defaults: Mapping[str, str] = BROKER_DEFAULTS
) -> UpdatePlan:
    """Pure: sort the ``key=value`` lines of an update (see UpdatePlan).

    Raises BlackListed, or ValueError naming the key when a value does not validate (nothing
    is applied then; upstream would store a bad number as it comes).
    """
    props = javaproperties.loads(text)
    if CONFIG_BLACK_LIST.intersection(props):
        raise BlackListed("Can not update config in black list.")
    plan = UpdatePlan()
    per_model: dict[int, dict[str, str]] = {}
    for key, value in props.items():
        found = _field_of(models, key)
        if found is None:
            if key in defaults:
                plan.kept[key] = value
            else:
                plan.ignored.append(key)
            continue
        per_model.setdefault(found[0], {})[key] = value
    for i, updates in per_model.items():
        model = models[i]
        try:
            # validated by upstream (alias) names, so an error names the key the admin typed
            candidate = model.model_validate({**model.model_dump(by_alias=True), **updates})
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(p) for p in err.get("loc", ()))
            raise ValueError(f"broker config key '{key}': {err.get('msg')}") from None
        for key, raw in updates.items():
            _, name = _field_of([model], key) or (0, key)
            if key in RUNTIME_UPDATABLE:
                plan.apply[(i, name)] = getattr(candidate, name)
            else:
                plan.at_restart[key] = raw
    return plan


class AdminBrokerProcessor:
    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStorePort,
        *,
        store_config: BaseModel | None = None,
        other_configs: Sequence[BaseModel] = (),
        kept_config: dict[str, str] | None = None,
        runtime_stats: Callable[[], dict[str, str]] = dict,
        on_config_changed: Callable[[list[str]], None] = lambda keys: None,
    ) -> None:
        self.config = config
        self.store = store
        self.store_config = store_config
        # every part of broker.conf, reported and updated by upstream key (the first part that
        # has a key owns it)
        self.models: list[BaseModel] = [config]
        if store_config is not None:
            self.models.append(store_config)
        self.models.extend(other_configs)
        # upstream-only keys set in broker.conf or by updates: reported, persisted, not acted on
        self.kept: dict[str, str] = dict(kept_config or {})
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
            plan = plan_update(self.models, text)
        except BlackListed as exc:
            return request.response(ResponseCode.NO_PERMISSION, str(exc))
        except (ValueError, UnicodeDecodeError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        changed = []
        for (i, name), new in plan.apply.items():
            if getattr(self.models[i], name) != new:
                setattr(self.models[i], name, new)
                changed.append(name)
        self.kept.update(plan.kept)
        if plan.ignored:
            log.warning("broker config update ignores unknown keys: %s", ", ".join(plan.ignored))
        if plan.at_restart:
            log.info(
                "broker config keys take effect at the next start: %s", sorted(plan.at_restart)
            )
        if changed or plan.kept or plan.at_restart:
            self.data_version = DataVersion(
                timestamp=int(time.time() * 1000), counter=self.data_version.counter + 1
            )
            log.info("broker config updated by %s: %s", channel.remote_addr, changed)
        if changed:
            self.on_config_changed(changed)
        values = plan.persisted(self.models)
        remark = await self._persist(values) if values else None
        return request.response(ResponseCode.SUCCESS, remark)

    async def _persist(self, values: dict[str, str]) -> str | None:
        """Write ``values`` (by upstream key) into the broker.conf the broker started from, so
        they hold after a restart; None when done, else why not (the update stays applied in
        memory, as upstream Configuration.persist only logs a failed write)."""
        path = self.config.broker_config_path
        if path is None:
            return None  # started without -c: nothing to rewrite, the change lasts until restart
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
        # upstream's brokerIP2 (the HA address) defaults to the host's address, as brokerIP1
        derived = {"brokerIP2": self.config.broker_ip2 or self.config.broker_ip1}
        commit_log_dir = getattr(self.store_config, "commit_log_dir", None)
        if commit_log_dir is not None:
            # upstream reports the CommitLog directory it uses (default: under storePathRootDir)
            derived["storePathCommitLog"] = str(commit_log_dir)
        body = config_report(self.models, {**derived, **self.kept}).encode("utf-8")
        version = orjson.dumps(self.data_version.to_json_obj()).decode()
        return request.response(ResponseCode.SUCCESS, None, {"version": version}, body)

    def runtime_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        table = {
            "brokerVersion": str(BROKER_VERSION),
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "bootTimestamp": str(self.boot_timestamp),
            "brokerPermission": str(self.config.broker_permission),
        }
        table.update(self._upstream_runtime_keys())
        table.update(self.store.runtime_info())
        table.update(self.runtime_stats())
        return request.response(ResponseCode.SUCCESS, None, None, KVTable(table=table).encode())

    def _upstream_runtime_keys(self) -> dict[str, str]:
        """The keys upstream's prepareRuntimeInfo adds (mqadmin clusterList and brokerStatus and
        the dashboard read them), as they are true of ferrymq: requests are served on an event
        loop, not from thread-pool queues, so no request waits in one (size and head wait 0);
        the capacities are the configured (reported, not acted on) values."""
        role = getattr(self.store_config, "broker_role", None)
        # upstream isSpecialServiceRunning: the schedule and transaction-check services, which
        # run on a master
        active = role is None or getattr(role, "value", role) != "SLAVE"
        config = upstream_config.report(BROKER_DEFAULTS, self.models, self.kept)
        table = {
            "brokerActive": str(active).lower(),
            "startAcceptSendRequestTimeStamp": config.get("startAcceptSendRequestTimeStamp", "0"),
            # ferrymq's delayed messages use the delay-level topic, not upstream's timer wheel
            "timerReadBehind": "0",
            "timerOffsetBehind": "0",
            "timerCongestNum": "0",
            "timerEnqueueTps": "0.0",
            "timerDequeueTps": "0.0",
            "EndTransactionQueueSize": "0",
            "EndTransactionThreadPoolQueueCapacity": config.get(
                "endTransactionPoolQueueCapacity", "0"
            ),
        }
        for pool in ("send", "pull", "litePull", "query", "ack"):
            table[f"{pool}ThreadPoolQueueSize"] = "0"
            table[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = "0"
            table[f"{pool}ThreadPoolQueueCapacity"] = config.get(
                f"{pool}ThreadPoolQueueCapacity", "0"
            )
        return table

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
