"""NameServer admin codes (upstream DefaultRequestProcessor): GET_SYSTEM_TOPIC_LIST_FROM_NS (304),
GET_UNIT_TOPIC_LIST (311), GET_HAS_UNIT_SUB_TOPIC_LIST (312),
GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST (313), UPDATE_NAMESRV_CONFIG (318), GET_NAMESRV_CONFIG (319).

Upstream's "system topic list" of a NameServer is every cluster name and broker name (the
topics auto-created per cluster and per broker) plus one broker address to ask for the rest.
Config: GET_NAMESRV_CONFIG reports upstream's keys with upstream's defaults, the values ferrymq
runs with and the upstream-only values set by updates (:mod:`ferrymq.upstream_config`). Updates:
keys of upstream's configBlackList (and ferrymq's listen/bind/home settings, which need a restart:
a deliberate difference, upstream reports a port it does not listen on) answer NO_PERMISSION
"Can not update config in black list."; upstream-only keys are kept and reported; a key nobody
knows is ignored, as upstream's Configuration.update ignores it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import javaproperties
from pydantic import ValidationError

from ferrymq.broker.processors.admin_broker import properties_text
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.namesrv.route_table import RouteTable
from ferrymq.remoting.bodies import TopicList
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer
from ferrymq.upstream_config import NAMESRV_DEFAULTS, report

log = logging.getLogger(__name__)

# upstream TopicSysFlag
FLAG_UNIT = 0x1
FLAG_UNIT_SUB = 0x2

CONFIG_BLACK_LIST = frozenset(
    {
        "configBlackList",
        "configStorePath",
        "kvConfigPath",
        "listenPort",
        "bindAddress",
        "rocketmqHome",
    }
)


def unit_topics(routes: RouteTable, want: Callable[[int], bool]) -> TopicList:
    """Topics whose (first) queue data's topicSysFlag satisfies ``want``."""
    out = []
    for topic, queues in routes.topic_queue_table.items():
        first = next(iter(queues.values()), None)
        if first is not None and want(first.topic_sys_flag):
            out.append(topic)
    return TopicList(topic_list=sorted(out))


def system_topic_list(routes: RouteTable) -> TopicList:
    names: list[str] = []
    for cluster, brokers in sorted(routes.cluster_addr_table.items()):
        names.append(cluster)
        names.extend(sorted(brokers))
    addr = None
    for data in routes.broker_addr_table.values():
        if data.broker_addrs:
            addr = next(iter(data.broker_addrs.values()))
            break
    return TopicList(topic_list=names, broker_addr=addr)


class NamesrvAdminProcessor:
    def __init__(
        self,
        routes: RouteTable,
        config: NamesrvConfig,
        on_config_changed: Callable[[list[str]], None] = lambda names: None,
    ) -> None:
        self.routes = routes
        self.config = config
        self.on_config_changed = on_config_changed
        # upstream-only keys set by updates: reported, not acted on
        self.kept: dict[str, str] = {}

    def register_to(self, server: RemotingServer) -> None:
        table = {
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.system_topics,
            RequestCode.GET_UNIT_TOPIC_LIST: self.unit_topics,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self.unit_sub_topics,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.unit_sub_ununit_topics,
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_config,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
        }
        for code, handler in table.items():
            server.register(code, handler)

    def _list(self, request: RemotingCommand, topics: TopicList) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, None, None, topics.encode())

    def system_topics(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return self._list(request, system_topic_list(self.routes))

    def unit_topics(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return self._list(request, unit_topics(self.routes, lambda f: bool(f & FLAG_UNIT)))

    def unit_sub_topics(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return self._list(request, unit_topics(self.routes, lambda f: bool(f & FLAG_UNIT_SUB)))

    def unit_sub_ununit_topics(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        topics = unit_topics(self.routes, lambda f: not f & FLAG_UNIT and bool(f & FLAG_UNIT_SUB))
        return self._list(request, topics)

    def update_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        raw = request.body_bytes()
        if not raw:
            return request.response(ResponseCode.SUCCESS)
        try:
            props = javaproperties.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"string2Properties error: {exc}")
        if CONFIG_BLACK_LIST.intersection(props):
            return request.response(
                ResponseCode.NO_PERMISSION, "Can not update config in black list."
            )
        by_alias = {(f.alias or n): n for n, f in NamesrvConfig.model_fields.items()}
        ours = {k: v for k, v in props.items() if k in by_alias}
        kept = {k: v for k, v in props.items() if k not in by_alias and k in NAMESRV_DEFAULTS}
        ignored = sorted(k for k in props if k not in by_alias and k not in NAMESRV_DEFAULTS)
        if ignored:
            log.warning("NameServer config update ignores unknown keys: %s", ", ".join(ignored))
        self.kept.update(kept)
        try:
            candidate = NamesrvConfig.model_validate(
                {**self.config.model_dump(by_alias=True), **ours}
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(p) for p in err.get("loc", ()))
            return request.response(ResponseCode.SYSTEM_ERROR, f"{key}: {err.get('msg')}")
        changed = []
        for key in ours:
            name = by_alias[key]
            value = getattr(candidate, name)
            if getattr(self.config, name) != value:
                setattr(self.config, name, value)
                changed.append(name)
        log.info("NameServer config updated by %s: %s", channel.remote_addr, changed)
        if changed:
            self.on_config_changed(changed)
        return request.response(ResponseCode.SUCCESS)

    def get_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        derived = {"kvConfigPath": str(self.config.kv_config_file)}
        values = report(NAMESRV_DEFAULTS, [self.config], {**derived, **self.kept})
        body = properties_text(values).encode("utf-8")
        return request.response(ResponseCode.SUCCESS, None, None, body)
