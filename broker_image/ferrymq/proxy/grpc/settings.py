"""Client settings (upstream ``GrpcClientSettingsManager``): each client's Telemetry ``Settings``,
and the server's view of them that it answers with and consumes by.

A producer's settings get the proxy's retry policy and the publishing limits; a consumer's get the
group's retry policy (max attempts = ``retryMaxTimes + 1``), FIFO flag, batch size and long-poll
timeout. A ReceiveMessage or Heartbeat from a client whose Settings have not arrived yet is served
from what the request itself says (:func:`settings_for_request`), where upstream fails it.
"""

from __future__ import annotations

from google.protobuf import duration_pb2

from ferrymq.proxy.backend import GroupConfig, GroupRetryPolicy
from ferrymq.proxy.config import ProxyConfig
from ferrymq.proxy.v2 import definition_pb2 as pb

DEFAULT_GROUP = GroupConfig(group="")


def _duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def merge_producer(settings: pb.Settings, config: ProxyConfig) -> pb.Settings:
    out = pb.Settings()
    out.CopyFrom(settings)
    policy = out.backoff_policy
    policy.max_attempts = config.grpc_client_producer_max_attempts
    policy.exponential_backoff.CopyFrom(
        pb.ExponentialBackoff(
            initial=_duration(config.grpc_client_producer_backoff_initial_millis),
            max=_duration(config.grpc_client_producer_backoff_max_millis),
            multiplier=config.grpc_client_producer_backoff_multiplier,
        )
    )
    out.publishing.validate_message_type = config.enable_topic_message_type_check
    out.publishing.max_body_size = config.max_message_size
    return out


def _retry(policy: GroupRetryPolicy, max_attempts: int) -> pb.RetryPolicy:
    out = pb.RetryPolicy(max_attempts=max_attempts)
    if policy.exponential is not None:
        initial, maximum, multiplier = policy.exponential
        out.exponential_backoff.CopyFrom(
            pb.ExponentialBackoff(
                initial=_duration(initial), max=_duration(maximum), multiplier=multiplier
            )
        )
    else:
        out.customized_backoff.CopyFrom(
            pb.CustomizedBackoff(next=[_duration(ms) for ms in policy.customized])
        )
    return out


def merge_subscription(
    settings: pb.Settings, group: GroupConfig | None, config: ProxyConfig
) -> pb.Settings:
    group = group or DEFAULT_GROUP
    out = pb.Settings()
    out.CopyFrom(settings)
    sub = out.subscription
    sub.receive_batch_size = config.grpc_client_consumer_long_polling_batch_size
    sub.long_polling_timeout.CopyFrom(
        _duration(config.grpc_client_consumer_max_long_polling_timeout_millis)
    )
    sub.fifo = group.consume_message_orderly
    out.backoff_policy.CopyFrom(_retry(group.retry_policy, group.retry_max_times + 1))
    return out


def settings_for_request(group: str, client_type: pb.ClientType.ValueType) -> pb.Settings:
    """A consumer's settings made from a request's group alone (before its Telemetry settings)."""
    return pb.Settings(
        client_type=client_type, subscription=pb.Subscription(group=pb.Resource(name=group))
    )


class ClientSettingsManager:
    """Raw settings per client id, as each client last sent them."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self._raw: dict[str, pb.Settings] = {}

    def update(self, client_id: str, settings: pb.Settings) -> None:
        self._raw[client_id] = settings

    def raw(self, client_id: str) -> pb.Settings | None:
        return self._raw.get(client_id)

    def remove(self, client_id: str) -> pb.Settings | None:
        return self._raw.pop(client_id, None)

    def merged(self, settings: pb.Settings, group: GroupConfig | None) -> pb.Settings:
        if settings.HasField("publishing"):
            return merge_producer(settings, self.config)
        if settings.HasField("subscription"):
            return merge_subscription(settings, group, self.config)
        return settings

    def producers_of(self, topic: str) -> list[str]:
        """Client ids whose settings publish ``topic``."""
        return [
            cid
            for cid, s in self._raw.items()
            if s.HasField("publishing") and any(t.name == topic for t in s.publishing.topics)
        ]

    def published_topics(self) -> set[str]:
        return {
            t.name
            for s in self._raw.values()
            if s.HasField("publishing")
            for t in s.publishing.topics
        }
