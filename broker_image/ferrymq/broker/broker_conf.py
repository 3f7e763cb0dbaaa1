"""Everything one ``broker.conf`` says, parsed once: :class:`BrokerConf`, composed of its parts.

Upstream spreads a broker's settings over BrokerConfig, NettyServerConfig, MessageStoreConfig
(with the HA keys) and a few system properties; here each part is its own pydantic model, owned
by the code that uses it, and this module is the one place that knows the list:

=================  ==========================  =========================================
part               model                       keys (examples)
=================  ==========================  =========================================
broker             BrokerConfig                brokerName, listenPort, namesrvAddr, ...
store              MessageStoreConfig          storePathRootDir, flushDiskType, ...
ha                 HASettings                  haListenPort, haSendHeartbeatInterval, ...
semantics          SemanticsConfig             transactionTimeOut, flushDelayOffsetInterval
pop                PopTimerSettings            reviveQueueNum, timerMaxDelaySec, ...
lag                LagConfig                   consumerLagSampleInterval, ...
controller_mode    ControllerModeSettings      enableControllerMode, controllerAddr, ...
acl                AclSettings                 aclEnable, aclFilePath, rocketmqHome
tls                TlsSettings                 tls.server.mode, tls.config.file, ...
=================  ==========================  =========================================

The sources are those of :mod:`ferrymq.properties` (defaults, ``NAMESRV_ADDR``, the file, then
``FERRYMQ_<lowerCamelCaseKey>`` environment variables), then the command line. A key no part knows
is reported once, in one warning, and ignored as RocketMQ does; bad values in any part are
reported together in one :class:`ConfigError`, each naming the key, the value, what is expected
and where the value came from.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import javaproperties
from pydantic import BaseModel, ConfigDict

from ferrymq.acl.settings import AclSettings, add_rocketmq_home
from ferrymq.broker.config import BrokerConfig, role_problem
from ferrymq.broker.controller_mode_config import ControllerModeSettings
from ferrymq.broker.lag.config import LagConfig
from ferrymq.broker.pop.settings import PopTimerSettings
from ferrymq.broker.semantics_config import SemanticsConfig
from ferrymq.ha.config import HASettings
from ferrymq.properties import ConfigError, build_model, collect_values, known_keys, load_properties
from ferrymq.remoting.tls import TlsSettings, add_tls_config_file
from ferrymq.store.config import MessageStoreConfig
from ferrymq.upstream_config import BROKER_DEFAULTS, kept_values

log = logging.getLogger(__name__)

__all__ = ["BrokerConf", "kept_broker_conf", "load_broker_conf", "parse_broker_conf"]


class BrokerConf(BaseModel):
    """One broker's configuration. The parts stay mutable where the broker updates them at run
    time (``UPDATE_BROKER_CONFIG`` assigns BrokerConfig fields, validated); which parts there are
    is fixed."""

    model_config = ConfigDict(frozen=True)

    broker: BrokerConfig
    store: MessageStoreConfig
    ha: HASettings
    semantics: SemanticsConfig
    pop: PopTimerSettings
    lag: LagConfig
    controller_mode: ControllerModeSettings
    acl: AclSettings
    tls: TlsSettings
    # "key (origin)" of every key no part knows, as warned about
    unknown_keys: tuple[str, ...] = ()

    @classmethod
    def parts(cls) -> dict[str, type[BaseModel]]:
        """Part name -> model, in declaration order."""
        out: dict[str, type[BaseModel]] = {}
        for name, info in cls.model_fields.items():
            model = info.annotation
            if isinstance(model, type) and issubclass(model, BaseModel):
                out[name] = model
        return out


# Values a part takes from somewhere other than broker.conf and FERRYMQ_* (ROCKETMQ_HOME, the
# file tls.config.file names); each part's own loader applies the same function.
_EXTRA_VALUES: dict[
    type[BaseModel], Callable[[dict[str, str], dict[str, str], Mapping[str, str]], None]
] = {
    AclSettings: add_rocketmq_home,
    TlsSettings: lambda values, origins, _env: add_tls_config_file(values, origins),
}


def parse_broker_conf(
    file_values: Mapping[str, str],
    env: Mapping[str, str],
    overrides: Mapping[str, str] | None = None,
    *,
    source: str = "properties",
) -> BrokerConf:
    """The parts from one set of sources, or ConfigError naming every bad key. Pure, except that
    ``tls.config.file`` is read when it is set."""
    overrides = overrides or {}
    parts: dict[str, BaseModel] = {}
    problems: list[str] = []
    unknown: set[str] | None = None
    known_anywhere: set[str] = set()
    for name, model_cls in BrokerConf.parts().items():
        values, origins, part_unknown = collect_values(model_cls, file_values, env, source=source)
        keys = known_keys(model_cls)
        known_anywhere |= keys.keys()
        for key, value in overrides.items():
            alias = keys.get(key)
            if alias is not None:
                values[alias] = value
                origins[alias] = "command line"
        unknown = set(part_unknown) if unknown is None else unknown & set(part_unknown)
        try:
            extra = _EXTRA_VALUES.get(model_cls)
            if extra is not None:
                extra(values, origins, env)
            parts[name] = build_model(model_cls, values, origins)
        except ConfigError as exc:
            problems.extend(exc.problems)
    unknown_keys = sorted(unknown or ())
    unknown_keys += [f"{key} (command line)" for key in overrides if key not in known_anywhere]
    # upstream's own keys that ferrymq does not act on are kept and reported (GET_BROKER_CONFIG)
    kept = [k for k in unknown_keys if k.split(" (")[0] in BROKER_DEFAULTS]
    unknown_keys = [k for k in unknown_keys if k not in kept]
    if kept:
        log.info("keeping upstream configuration keys ferrymq does not act on: %s", ", ".join(kept))
    if unknown_keys:
        log.warning("ignoring unknown configuration keys: %s", ", ".join(unknown_keys))
    if problems:
        raise ConfigError(f"invalid configuration in {source}: " + "; ".join(problems), problems)
    conf = BrokerConf.model_validate({**parts, "unknown_keys": tuple(unknown_keys)})
    problem = cross_part_problem(conf)
    if problem is not None:
        raise ConfigError(f"{source}: {problem}")
    return conf


def cross_part_problem(conf: BrokerConf) -> str | None:
    """Why settings of different parts cannot go together, or None. Pure."""
    broker_id = conf.broker.broker_id
    if conf.controller_mode.enable_controller_mode:
        # the controller decides the role; the elected master registers as brokerId 0
        if broker_id < 1:
            return (
                f"brokerId={broker_id}: with enableControllerMode=true each replica needs its "
                "own brokerId >= 1 (the elected master registers as 0)"
            )
        return None
    return role_problem(broker_id, conf.store.broker_role.value)


def load_broker_conf(
    path: Path | None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> BrokerConf:
    """Read ``path`` (once) with the ``FERRYMQ_*`` environment and ``overrides`` (the command
    line's, by upstream key) into a :class:`BrokerConf`; ConfigError names every bad key."""
    file_values = load_properties(path) if path is not None else {}
    conf = parse_broker_conf(
        file_values,
        os.environ if env is None else env,
        overrides,
        source=str(path) if path is not None else "properties",
    )
    # runtime updates (UPDATE_BROKER_CONFIG) are written back to the file the broker started from
    conf.broker.broker_config_path = path
    return conf


def kept_broker_conf(path: Path | None) -> dict[str, str]:
    """The keys of broker.conf ``path`` that only upstream has (thread pools, Netty buffers...):
    accepted, reported by GET_BROKER_CONFIG and kept across updates, not acted on (see
    :mod:`ferrymq.upstream_config`). Empty without a file."""
    if path is None or not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        values = dict(javaproperties.load(f))
    return kept_values(BROKER_DEFAULTS, BrokerConf.parts().values(), values)
