"""ACL switches read from broker.conf / namesrv.conf: ``aclEnable`` (upstream), and ferrymq's
``aclFilePath`` (a plain_acl.yml or a directory of *.yml) and ``rocketmqHome`` (else the
``ROCKETMQ_HOME`` environment variable) for upstream's default locations."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ferrymq.acl.plain_config import acl_files
from ferrymq.properties import build_model, collect_values, load_properties

ROCKETMQ_HOME_ENV = "ROCKETMQ_HOME"


class AclSettings(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    acl_enable: bool = Field(default=False, alias="aclEnable")
    acl_file_path: Path | None = Field(default=None, alias="aclFilePath")
    rocketmq_home: Path | None = Field(default=None, alias="rocketmqHome")
    # how often the files are checked for changes (s)
    acl_reload_interval: float = Field(default=1.0, gt=0, le=300, alias="aclReloadInterval")

    def files(self) -> list[Path]:
        return acl_files(self.rocketmq_home, self.acl_file_path)


def load_acl_settings(path: Path | None, env: Mapping[str, str] | None = None) -> AclSettings:
    env = os.environ if env is None else env
    file_values = load_properties(path) if path is not None else {}
    values, origins, _ = collect_values(
        AclSettings, file_values, env, source=str(path) if path else "properties"
    )
    add_rocketmq_home(values, origins, env)
    return build_model(AclSettings, values, origins)


def add_rocketmq_home(
    values: dict[str, str], origins: dict[str, str], env: Mapping[str, str]
) -> None:
    """``rocketmqHome`` from ``ROCKETMQ_HOME`` when the configuration does not set it."""
    if "rocketmqHome" not in values and env.get(ROCKETMQ_HOME_ENV):
        values["rocketmqHome"] = env[ROCKETMQ_HOME_ENV]
        origins["rocketmqHome"] = f"environment {ROCKETMQ_HOME_ENV}"
