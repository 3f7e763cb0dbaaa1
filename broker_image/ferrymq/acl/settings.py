"""ACL switches read from broker.conf / namesrv.conf: ``aclEnable`` (upstream), and ferrymq's
``aclFilePath`` (a plain_acl.yml or a directory of *.yml) and ``rocketmqHome`` (else the
``ROCKETMQ_HOME`` environment variable) for upstream's default locations; and the credentials of
the broker's own calls, ``innerClientAuthenticationCredentials`` (upstream 5.x name and JSON form,
``{"accessKey":"...","secretKey":"..."}``), with which it signs its NameServer registrations."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

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
    inner_client_authentication_credentials: str | None = Field(
        default=None, alias="innerClientAuthenticationCredentials"
    )

    @field_validator("inner_client_authentication_credentials")
    @classmethod
    def _credentials_json(cls, text: str | None) -> str | None:
        if text is not None and text.strip():
            _parse_credentials(text)  # refuse a bad value at start-up, not at the first call
        return text

    def inner_credentials(self) -> tuple[str, str] | None:
        """(accessKey, secretKey) of innerClientAuthenticationCredentials, or None."""
        text = self.inner_client_authentication_credentials
        return _parse_credentials(text) if text and text.strip() else None

    def files(self) -> list[Path]:
        return acl_files(self.rocketmq_home, self.acl_file_path)


def _parse_credentials(text: str) -> tuple[str, str]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f'is not JSON ({exc.msg}); write {{"accessKey":"...","secretKey":"..."}}'
        ) from None
    access_key = doc.get("accessKey") if isinstance(doc, dict) else None
    secret_key = doc.get("secretKey") if isinstance(doc, dict) else None
    if (
        not isinstance(access_key, str)
        or not access_key
        or not isinstance(secret_key, str)
        or not secret_key
    ):
        raise ValueError('needs both "accessKey" and "secretKey" (non-empty strings)')
    return access_key, secret_key


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
