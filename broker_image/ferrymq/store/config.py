"""MessageStoreConfig: every store setting with its upstream ``broker.conf`` spelling.

Mirrors the store part of upstream ``MessageStoreConfig``. Attributes are snake_case in Python and
accept the upstream camelCase keys (``mappedFileSizeCommitLog``...) as aliases, so a broker.conf
string map validates directly (see :mod:`ferrymq.properties`). Read once and handed to the
services at construction; nothing re-reads it in a loop.
"""

from __future__ import annotations

import enum
from pathlib import Path

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

CQ_STORE_UNIT_SIZE = 20

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 1m"`` -> ``[1000, 5000, 60000]`` (ms per level, level 1 first)."""
    levels: list[int] = []
    for item in text.split():
        unit = item[-1:]
        if unit not in _DELAY_UNITS or not item[:-1].isdigit():
            raise ValueError(f"delay level {item!r} must be a number followed by one of s, m, h, d")
        levels.append(int(item[:-1]) * _DELAY_UNITS[unit])
    if not levels:
        raise ValueError("at least one delay level is required")
    return levels


class MessageStoreConfig(BaseModel):
    """Store settings (upstream names as aliases; defaults as upstream 4.x)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=False,
        validate_assignment=True,
    )

    store_path_root_dir: Path = Field(default_factory=lambda: Path.home() / "store")
    # Empty means <storePathRootDir>/commitlog, as upstream.
    store_path_commit_log: Path | None = Field(default=None, alias="storePathCommitLog")

    # Upstream spelled these "maped..." before 4.5; broker.conf files from those releases still do.
    mapped_file_size_commit_log: int = Field(
        default=1024 * 1024 * 1024,
        ge=4096,
        le=2**31 - 1,
        validation_alias=AliasChoices(
            "mappedFileSizeCommitLog", "mapedFileSizeCommitLog", "mapped_file_size_commit_log"
        ),
    )
    mapped_file_size_consume_queue: int = Field(
        default=300_000 * CQ_STORE_UNIT_SIZE,
        ge=CQ_STORE_UNIT_SIZE * 4,
        validation_alias=AliasChoices(
            "mappedFileSizeConsumeQueue",
            "mapedFileSizeConsumeQueue",
            "mapped_file_size_consume_queue",
        ),
    )
    max_message_size: int = Field(default=4 * 1024 * 1024, ge=1024)

    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    sync_flush_timeout: int = Field(default=5000, ge=1, description="ms")
    flush_interval_commit_log: int = Field(default=500, ge=1, description="ms")
    flush_commit_log_least_pages: int = Field(default=4, ge=0)
    flush_commit_log_thorough_interval: int = Field(default=10_000, ge=1, description="ms")
    flush_interval_consume_queue: int = Field(default=1000, ge=1, description="ms")
    flush_consume_queue_least_pages: int = Field(default=2, ge=0)
    flush_consume_queue_thorough_interval: int = Field(default=60_000, ge=1, description="ms")

    file_reserved_time: int = Field(default=72, ge=0, description="hours")
    delete_when: str = "04"
    disk_max_used_space_ratio: int = Field(default=75, ge=10, le=95)
    # Upstream reads these two from system properties (rocketmq.broker.diskSpace*Ratio).
    disk_space_warning_level_ratio: int = Field(default=90, ge=10, le=99)
    disk_space_clean_forcibly_ratio: int = Field(default=85, ge=10, le=99)
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: int = Field(default=10_000, ge=10, description="ms")
    destroy_maped_file_interval_forcibly: int = Field(
        default=120_000, ge=0, alias="destroyMapedFileIntervalForcibly", description="ms"
    )
    delete_commit_log_files_interval: int = Field(default=100, ge=0, description="ms")
    delete_consume_queue_files_interval: int = Field(default=100, ge=0, description="ms")

    message_index_enable: bool = True
    max_hash_slot_num: int = Field(default=5_000_000, ge=1)
    max_index_num: int = Field(default=20_000_000, ge=2)
    message_index_safe: bool = False

    max_transfer_bytes_on_message_in_memory: int = Field(default=256 * 1024, ge=1)
    max_transfer_count_on_message_in_memory: int = Field(default=32, ge=1)
    access_message_in_memory_max_ratio: int = Field(default=40, ge=0, le=100)
    # upstream: a SLAVE leaves a consumer's offset alone when it is outside its queue (its queue
    # may only be behind the master's); true lets it correct the offset as a master does
    offset_check_in_slave: bool = False

    check_crc_on_recover: bool = Field(default=True, alias="checkCRCOnRecover")
    message_delay_level: str = DEFAULT_DELAY_LEVELS

    @field_validator("delete_when")
    @classmethod
    def _check_delete_when(cls, value: str) -> str:
        hours = [h.strip() for h in value.split(";") if h.strip()]
        if not hours or not all(h.isdigit() and 0 <= int(h) <= 23 for h in hours):
            raise ValueError(
                "must be hours of the day 00-23 separated by ';', e.g. '04' or '04;16'"
            )
        return value

    @field_validator("message_delay_level")
    @classmethod
    def _check_delay_levels(cls, value: str) -> str:
        parse_delay_levels(value)
        return value

    @field_validator("mapped_file_size_consume_queue")
    @classmethod
    def _round_cq_size(cls, value: int) -> int:
        # Upstream rounds up to a whole number of 20-byte units.
        return -(-value // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    @model_validator(mode="after")
    def _check_ratios(self) -> MessageStoreConfig:
        if self.disk_space_clean_forcibly_ratio > self.disk_space_warning_level_ratio:
            raise ValueError(
                "diskSpaceCleanForciblyRatio must not exceed diskSpaceWarningLevelRatio "
                f"({self.disk_space_clean_forcibly_ratio} > {self.disk_space_warning_level_ratio})"
            )
        return self

    # --- derived paths ---------------------------------------------------------------------------

    @property
    def commit_log_dir(self) -> Path:
        return self.store_path_commit_log or (self.store_path_root_dir / "commitlog")

    @property
    def consume_queue_dir(self) -> Path:
        return self.store_path_root_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.store_path_root_dir / "index"

    @property
    def checkpoint_path(self) -> Path:
        return self.store_path_root_dir / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.store_path_root_dir / "abort"

    @property
    def config_dir(self) -> Path:
        return self.store_path_root_dir / "config"

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.message_delay_level)

    @property
    def delete_hours(self) -> set[int]:
        return {int(h) for h in self.delete_when.split(";") if h.strip()}
