"""Check a generated broker.conf / namesrv.conf with the very models the pods load it with (pure).

The CRD schema can only say "a map of strings"; whether ``fileReservedTime=two days`` is usable is
decided by ferrymq's own config models (every part of ``BrokerConf``: broker, store, HA, semantics,
lag, controller mode, ACL, TLS; ``NamesrvConfig``). Checking here turns a pod that would crash-loop on start into a
``ReconcileFailed`` condition naming the key. Keys none of the models know are reported separately:
the broker ignores them (as RocketMQ does), so they are a warning, not a refusal (a newer broker
image may know keys this operator does not).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ferrymq.broker.broker_conf import BrokerConf
from ferrymq.namesrv.config import NamesrvConfig
from ferrymq.properties import ConfigError, build_model, known_keys
from pydantic import BaseModel

# every model a broker reads from its broker.conf: a key one of them reads is never "unknown"
BROKER_MODELS: tuple[type[BaseModel], ...] = tuple(BrokerConf.parts().values())
NAMESRV_MODELS: tuple[type[BaseModel], ...] = (NamesrvConfig,)


@dataclass(frozen=True)
class ConfReport:
    problems: list[str]  # bad values: refuse the spec
    unknown: list[str]  # keys no model knows: warn


def check(
    conf: Mapping[str, str], user_keys: Sequence[str], models: Sequence[type[BaseModel]]
) -> ConfReport:
    """Validate ``conf`` with each model; problems with user keys are named ``spec.config.<key>``."""
    user = set(user_keys)
    problems: list[str] = []
    known_anywhere: set[str] = set()
    for model in models:
        keys = known_keys(model)
        known_anywhere |= set(keys)
        values = {keys[k]: v for k, v in conf.items() if k in keys}
        origins = {keys[k]: ("spec.config" if k in user else "operator") for k in conf if k in keys}
        try:
            build_model(model, values, origins)
        except ConfigError as error:
            problems.extend(error.problems)
    unknown = sorted(k for k in user if k not in known_anywhere)
    return ConfReport(problems=sorted(set(problems)), unknown=unknown)


def check_broker(conf: Mapping[str, str], user_keys: Sequence[str]) -> ConfReport:
    return check(conf, user_keys, BROKER_MODELS)


def check_namesrv(conf: Mapping[str, str], user_keys: Sequence[str]) -> ConfReport:
    return check(conf, user_keys, NAMESRV_MODELS)
