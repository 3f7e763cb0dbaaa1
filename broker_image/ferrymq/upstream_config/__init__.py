"""Apache RocketMQ's configuration keys, each with upstream's default, for GET_BROKER_CONFIG and
GET_NAMESRV_CONFIG: an upstream broker reports every field of BrokerConfig, NettyServerConfig,
NettyClientConfig and MessageStoreConfig (411+ keys), a NameServer those of NamesrvConfig and
NettyServerConfig, and mqadmin, the dashboard and operators' scripts read them by name.

The tables (``broker.properties``, ``namesrv.properties``) are generated from the 5.4.0 jars by
``tests/interop/mqadmin/config_defaults.py``, and a test checks them against the jars.

What a ferrymq server reports for a key (:func:`report`), in order of precedence:
1. *applied*: a key one of ferrymq's config models has (brokerName, flushIntervalCommitLog,
   ...): the value the server runs with;
2. *kept*: a key only upstream has, set in broker.conf / namesrv.conf or by an UPDATE_*_CONFIG:
   the value set, which ferrymq keeps, persists and reports, but does not act on (thread pool
   sizes, Netty buffer sizes, features ferrymq does not have);
3. otherwise upstream's default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import javaproperties
from pydantic import BaseModel

DATA_DIR = Path(__file__).resolve().parent

# keys whose upstream default depends on the host (its address, name, user.home): ferrymq's models
# supply them
HOST_DEPENDENT = frozenset(
    {
        "brokerIP1",
        "brokerIP2",
        "brokerName",
        "storePathRootDir",
        "configStorePath",
        "kvConfigPath",
        "rocketmqHome",
    }
)


def _load(name: str) -> dict[str, str]:
    with open(DATA_DIR / name, encoding="utf-8") as f:
        return dict(javaproperties.load(f))


BROKER_DEFAULTS: Mapping[str, str] = _load("broker.properties")
NAMESRV_DEFAULTS: Mapping[str, str] = _load("namesrv.properties")


def property_value(value: object) -> str:
    """A setting as a properties file spells it (Java booleans are lower-case)."""
    if isinstance(value, bool):
        return str(value).lower()
    if hasattr(value, "value") and not isinstance(value, (int, float, str)):
        return str(value.value)  # an enum: its upstream name
    return str(value)


def model_values(models: Iterable[BaseModel]) -> dict[str, str]:
    """upstream key -> value of every set field of ``models`` (later models win). Pure."""
    out: dict[str, str] = {}
    for model in models:
        for name, value in model.model_dump(by_alias=True, mode="json").items():
            if value is not None:
                out[name] = property_value(value)
    return out


def report(
    defaults: Mapping[str, str], models: Iterable[BaseModel], kept: Mapping[str, str]
) -> dict[str, str]:
    """key -> value as GET_*_CONFIG reports it (see the module doc). Pure."""
    applied = model_values(models)
    out = dict(defaults)  # host-dependent keys a model does not supply stay empty
    out.update({k: v for k, v in kept.items() if k not in applied})
    out.update(applied)
    return dict(sorted(out.items()))


def kept_values(
    defaults: Mapping[str, str], models: Iterable[type[BaseModel]], values: Mapping[str, str]
) -> dict[str, str]:
    """The entries of ``values`` (a properties file, an update) for keys only upstream has:
    what :func:`report` keeps. Pure."""
    known = set()
    for model in models:
        for name, info in model.model_fields.items():
            known.add(info.alias or name)
    return {k: v for k, v in values.items() if k in defaults and k not in known}
