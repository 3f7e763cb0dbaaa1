"""Java ``.properties`` configuration (``broker.conf``, ``namesrv.conf``) into pydantic models.

Sources, lowest precedence first:

1. the model's defaults;
2. ``NAMESRV_ADDR`` from the environment as ``namesrvAddr`` (upstream reads it as a default);
3. the properties file (``javaproperties``: escapes, ``:`` or ``=``, continuation lines);
4. ``FERRYMQ_<upstreamKey>`` environment variables, e.g. ``FERRYMQ_brokerName=broker-b``
   (the key keeps its upstream spelling so it maps one-to-one onto broker.conf).

Keys the model does not know are collected and logged, not rejected: RocketMQ ignores unknown
keys too, and operators copy broker.conf files between versions. A bad value raises
:class:`ConfigError` whose message names the key, the value, where it came from and why.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import javaproperties
from pydantic import AliasChoices, BaseModel, ValidationError

log = logging.getLogger(__name__)

ENV_PREFIX = "FERRYMQ_"
NAMESRV_ADDR_ENV = "NAMESRV_ADDR"

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names each bad key and why."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


@dataclass(slots=True)
class LoadedConfig(Generic[M]):
    model: M
    unknown_keys: list[str] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)  # key -> where its value came from


def load_properties(path: Path) -> dict[str, str]:
    """The key/value pairs of a Java properties file."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = javaproperties.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such configuration file") from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot be read as a properties file: {exc}") from exc
    return {str(k).strip(): str(v).strip() for k, v in data.items()}


def known_keys(model_cls: type[BaseModel]) -> dict[str, str]:
    """Every accepted key (upstream alias and Python name) -> the alias used for validation."""
    keys: dict[str, str] = {}
    for name, info in model_cls.model_fields.items():
        alias = info.alias or name
        keys[alias] = alias
        keys[name] = alias
        # Older upstream spellings accepted for validation (e.g. mapedFileSizeCommitLog).
        if isinstance(info.validation_alias, AliasChoices):
            for choice in info.validation_alias.choices:
                if isinstance(choice, str):
                    keys.setdefault(choice, alias)
    return keys


def collect_values(
    model_cls: type[BaseModel],
    file_values: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    source: str = "properties",
) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """Merge the sources: ``(values by alias, origin by alias, unknown keys)``. Pure."""
    env = os.environ if env is None else env
    keys = known_keys(model_cls)
    values: dict[str, str] = {}
    origins: dict[str, str] = {}
    unknown: list[str] = []

    def put(key: str, value: str, origin: str) -> None:
        alias = keys.get(key)
        if alias is None:
            unknown.append(f"{key} ({origin})")
            return
        values[alias] = value
        origins[alias] = origin

    if NAMESRV_ADDR_ENV in env and "namesrvAddr" in keys:
        put("namesrvAddr", env[NAMESRV_ADDR_ENV], f"environment {NAMESRV_ADDR_ENV}")
    for key, value in (file_values or {}).items():
        put(key, value, source)
    for name, value in env.items():
        key = name[len(ENV_PREFIX) :]
        # Upstream keys are lowerCamelCase (brokerName, tls.server.mode): FERRYMQ_K8S_CACHE,
        # FERRYMQ_OPERATOR_* and the like are settings of other tools, not broker.conf keys.
        if name.startswith(ENV_PREFIX) and key[:1].islower():
            put(key, value, f"environment {name}")
    return values, origins, unknown


def build_model(
    model_cls: type[M],
    values: Mapping[str, str],
    origins: Mapping[str, str] | None = None,
) -> M:
    """Validate a string map into ``model_cls``; ConfigError names every bad key and why."""
    try:
        return model_cls.model_validate(dict(values))
    except ValidationError as exc:
        problems: list[str] = []
        for err in exc.errors():
            loc = err.get("loc") or ()
            key = str(loc[0]) if loc else "(whole configuration)"
            where = (origins or {}).get(key)
            shown = values.get(key, err.get("input")) if loc else None
            reason = err.get("msg", "invalid")
            text = f"{key}={shown!r}: {reason}" if loc else f"{key}: {reason}"
            if where:
                text += f" (from {where})"
            problems.append(text)
        raise ConfigError(
            f"invalid {model_cls.__name__}: " + "; ".join(problems), problems
        ) from None


def load_config(
    model_cls: type[M],
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> LoadedConfig[M]:
    """Defaults <- NAMESRV_ADDR <- file <- FERRYMQ_* <- ``overrides`` (e.g. CLI options)."""
    file_values = load_properties(path) if path is not None else {}
    values, origins, unknown = collect_values(
        model_cls, file_values, env, source=str(path) if path else "properties"
    )
    keys = known_keys(model_cls)
    for key, value in (overrides or {}).items():
        alias = keys.get(key)
        if alias is None:
            unknown.append(f"{key} (override)")
            continue
        values[alias] = value
        origins[alias] = "command line"
    if unknown:
        log.warning("ignoring unknown configuration keys: %s", ", ".join(unknown))
    model = build_model(model_cls, values, origins)
    return LoadedConfig(model, unknown, origins)
