"""The ``plain_acl.yml`` model (upstream PlainPermissionManager's input) and where it is found.

Format and file names as upstream 4.9: ``$ROCKETMQ_HOME/conf/plain_acl.yml`` plus every ``*.yml``
under ``$ROCKETMQ_HOME/conf/acl/``; ferrymq's ``aclFilePath`` (broker.conf/namesrv.conf) points
at one file or a directory instead. Accounts of all files are merged; an AccessKey defined twice
is an error naming both files. Values are checked when loaded (key lengths, permission names,
address patterns), so a typo is reported with its file instead of refusing clients later.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ferrymq.acl.permission import DENY, parse_perm
from ferrymq.acl.remote_address import AddressPattern
from ferrymq.topic_validator import retry_topic

PLAIN_ACL_FILE = "plain_acl.yml"
ACL_DIR = "acl"
_PERM_NAMES = {"PUB", "SUB", "PUB|SUB", "SUB|PUB", "DENY"}


class AclConfigError(ValueError):
    """A plain_acl.yml that cannot be used; the message names the file and the problem."""


def _check_perm_name(value: str) -> str:
    if value.strip().upper() not in _PERM_NAMES:
        raise ValueError(f"permission {value!r} is not one of PUB, SUB, PUB|SUB, DENY")
    return value.strip().upper()


def _split_perm_entry(entry: str) -> tuple[str, str]:
    name, sep, perm = entry.rpartition("=")
    if not sep or not name.strip():
        raise ValueError(f"{entry!r} is not resource=PERM (e.g. topicA=PUB|SUB)")
    return name.strip(), _check_perm_name(perm)


class PlainAccount(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    access_key: str = Field(alias="accessKey", min_length=6)
    secret_key: str = Field(alias="secretKey", min_length=6)
    white_remote_address: str | None = Field(default=None, alias="whiteRemoteAddress")
    admin: bool = False
    # upstream defaults: a resource the account does not list is DENY unless these say otherwise
    default_topic_perm: str = Field(default="DENY", alias="defaultTopicPerm")
    default_group_perm: str = Field(default="DENY", alias="defaultGroupPerm")
    topic_perms: list[str] = Field(default_factory=list, alias="topicPerms")
    group_perms: list[str] = Field(default_factory=list, alias="groupPerms")

    @field_validator("access_key", "secret_key", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        # YAML reads secretKey: 12345678 as a number; upstream takes it as text
        return str(value) if isinstance(value, (int, float)) else value

    @field_validator("white_remote_address", mode="before")
    @classmethod
    def _white(cls, value: Any) -> Any:
        if value is None:
            return None
        text = str(value).strip()
        if text:
            AddressPattern.parse(text)
        return text or None

    @field_validator("default_topic_perm", "default_group_perm")
    @classmethod
    def _default_perm(cls, value: str) -> str:
        return _check_perm_name(value)

    @field_validator("topic_perms", "group_perms", mode="before")
    @classmethod
    def _perm_list(cls, value: Any) -> Any:
        if value is None:
            return []
        if not isinstance(value, list):
            raise ValueError("must be a list of resource=PERM entries")
        out = [str(entry) for entry in value]
        for entry in out:
            _split_perm_entry(entry)
        return out


class PlainAclFile(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    global_white_remote_addresses: list[str] = Field(
        default_factory=list, alias="globalWhiteRemoteAddresses"
    )
    accounts: list[PlainAccount] = Field(default_factory=list)

    @field_validator("global_white_remote_addresses", mode="before")
    @classmethod
    def _addresses(cls, value: Any) -> Any:
        if value is None:
            return []
        if not isinstance(value, list):
            raise ValueError("must be a list of address patterns")
        out = [str(v).strip() for v in value if v is not None and str(v).strip()]
        for pattern in out:
            AddressPattern.parse(pattern)
        return out

    @field_validator("accounts", mode="before")
    @classmethod
    def _accounts(cls, value: Any) -> Any:
        return [] if value is None else value


@dataclass(frozen=True, slots=True)
class Account:
    """One account ready for decisions: permissions as bits, groups as retry topics."""

    access_key: str
    secret_key: str
    admin: bool
    white: AddressPattern | None
    default_topic_perm: int
    default_group_perm: int
    resource_perms: dict[str, int]
    source: Path | None = None


@dataclass(frozen=True, slots=True)
class AclTable:
    """Everything the validator needs, built once per (re)load and then read-only."""

    global_white: tuple[AddressPattern, ...] = ()
    accounts: dict[str, Account] = field(default_factory=dict)
    files: tuple[Path, ...] = ()


def account_of(model: PlainAccount, source: Path | None = None) -> Account:
    perms: dict[str, int] = {}
    for entry in model.topic_perms:
        name, perm = _split_perm_entry(entry)
        perms[name] = parse_perm(perm)
    for entry in model.group_perms:
        name, perm = _split_perm_entry(entry)
        perms[retry_topic(name)] = parse_perm(perm)
    return Account(
        access_key=model.access_key,
        secret_key=model.secret_key,
        admin=model.admin,
        white=AddressPattern.parse(model.white_remote_address)
        if model.white_remote_address
        else None,
        default_topic_perm=parse_perm(model.default_topic_perm),
        default_group_perm=parse_perm(model.default_group_perm),
        resource_perms=perms,
        source=source,
    )


def parse_acl_text(text: str, source: Path | None = None) -> PlainAclFile:
    where = str(source) if source else "plain_acl.yml"
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AclConfigError(f"{where}: not valid YAML: {exc}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise AclConfigError(f"{where}: the top level must be a mapping (accounts: ...)")
    try:
        return PlainAclFile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg')}"
            for err in exc.errors()
        )
        raise AclConfigError(f"{where}: {problems}") from None


def build_table(files: Iterable[tuple[Path | None, PlainAclFile]]) -> AclTable:
    """Merge parsed files into one table; an AccessKey in two files is an AclConfigError."""
    white: list[AddressPattern] = []
    accounts: dict[str, Account] = {}
    paths: list[Path] = []
    for path, parsed in files:
        if path is not None:
            paths.append(path)
        white.extend(AddressPattern.parse(p) for p in parsed.global_white_remote_addresses)
        for model in parsed.accounts:
            previous = accounts.get(model.access_key)
            if previous is not None:
                raise AclConfigError(
                    f"accessKey {model.access_key!r} is defined in both {previous.source} "
                    f"and {path}"
                )
            accounts[model.access_key] = account_of(model, path)
    return AclTable(tuple(white), accounts, tuple(paths))


def acl_files(rocketmq_home: Path | None, explicit: Path | None) -> list[Path]:
    """The files to read: ``explicit`` (a file, or a directory's ``*.yml``/``*.yaml``), else
    ``$ROCKETMQ_HOME/conf/plain_acl.yml`` and ``$ROCKETMQ_HOME/conf/acl/*.yml`` (upstream)."""
    if explicit is not None:
        if explicit.is_dir():
            return sorted(p for p in explicit.iterdir() if p.suffix in (".yml", ".yaml"))
        return [explicit]
    if rocketmq_home is None:
        return []
    conf = rocketmq_home / "conf"
    found = [conf / PLAIN_ACL_FILE] if (conf / PLAIN_ACL_FILE).is_file() else []
    acl_dir = conf / ACL_DIR
    if acl_dir.is_dir():
        found.extend(sorted(p for p in acl_dir.iterdir() if p.suffix == ".yml"))
    return found


def load_table(paths: list[Path]) -> AclTable:
    """Read and merge ``paths``; AclConfigError names the file on any problem. Blocking."""
    if not paths:
        raise AclConfigError(
            "aclEnable=true but no ACL file was found: put accounts in "
            "$ROCKETMQ_HOME/conf/plain_acl.yml (or conf/acl/*.yml), or set aclFilePath"
        )
    parsed: list[tuple[Path | None, PlainAclFile]] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise AclConfigError(f"{path}: cannot be read: {exc}") from None
        parsed.append((path, parse_acl_text(text, path)))
    return build_table(parsed)


__all__ = [
    "DENY",
    "Account",
    "AclConfigError",
    "AclTable",
    "PlainAccount",
    "PlainAclFile",
    "acl_files",
    "build_table",
    "load_table",
    "parse_acl_text",
    "retry_topic",
]
