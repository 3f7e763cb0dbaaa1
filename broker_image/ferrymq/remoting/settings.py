"""Settings every remoting server process shares (upstream NettyServerConfig + shutdown), as a
pydantic mixin of BrokerConfig and NamesrvConfig, and the frozen runtime form the server takes."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import AliasChoices, BaseModel, Field

from ferrymq.remoting.eventloop import DEFAULT_SHUTDOWN_GRACE_SECONDS
from ferrymq.remoting.frame import MAX_FRAME_SIZE

DEFAULT_CHANNEL_MAX_IDLE_SECONDS = 120
# bytes held, across all connections of one server, for frames whose bytes have not all arrived
DEFAULT_MAX_UNFINISHED_FRAME_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What a RemotingServer enforces on its connections (0 disables a limit)."""

    # a connection that sent nothing for this long, with no request of it in progress, is closed
    channel_max_idle_seconds: float = DEFAULT_CHANNEL_MAX_IDLE_SECONDS
    # the sum over connections of bytes buffered for unfinished frames; the connection whose
    # bytes go over it is closed (one connection holds at most one frame, <= max_frame_size)
    max_unfinished_frame_bytes: int = DEFAULT_MAX_UNFINISHED_FRAME_BYTES
    max_frame_size: int = MAX_FRAME_SIZE


class ServerSettings(BaseModel):
    """Keys of broker.conf and namesrv.conf for the process's server side."""

    # upstream NettyServerConfig.serverChannelMaxIdleTimeSeconds; the short spelling is accepted
    server_channel_max_idle_time_seconds: int = Field(
        default=DEFAULT_CHANNEL_MAX_IDLE_SECONDS,
        ge=0,
        description="s; 0 never closes idle connections",
        validation_alias=AliasChoices(
            "serverChannelMaxIdleTimeSeconds",
            "channelMaxIdleTimeSeconds",
            "server_channel_max_idle_time_seconds",
        ),
    )
    # ferrymq: cap on the bytes all connections together hold for frames not yet complete
    server_max_unfinished_frame_bytes: int = Field(
        default=DEFAULT_MAX_UNFINISHED_FRAME_BYTES,
        ge=MAX_FRAME_SIZE,
        description="bytes; at least one whole frame (16 MiB)",
    )
    # ferrymq: how long a graceful stop (first SIGTERM) may take before the process is forced out
    shutdown_grace_seconds: float = Field(default=DEFAULT_SHUTDOWN_GRACE_SECONDS, gt=0, le=3600)

    def server_limits(self) -> ServerLimits:
        return ServerLimits(
            channel_max_idle_seconds=self.server_channel_max_idle_time_seconds,
            max_unfinished_frame_bytes=self.server_max_unfinished_frame_bytes,
        )
