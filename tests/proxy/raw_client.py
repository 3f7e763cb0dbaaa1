"""A bare gRPC caller of ``MessagingService`` with a 5.x client's metadata, for looking at the
server's own ``Status{code, message}`` (the clients turn them into exceptions). Uses ferrymq's
generated stubs; TLS-less (both proxies serve plaintext on their gRPC port too)."""

from __future__ import annotations

import datetime
import hashlib
import hmac
import uuid
from typing import Any

import grpc
from ferrymq.proxy.v2 import definition_pb2 as pb
from ferrymq.proxy.v2 import service_pb2 as spb
from ferrymq.proxy.v2 import service_pb2_grpc as sgrpc
from google.protobuf import duration_pb2


def message_id() -> str:
    return ("01" + uuid.uuid4().hex + uuid.uuid4().hex)[:34].upper()


def duration(seconds: float) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=int(seconds), nanos=int((seconds % 1) * 1e9))


class RawClient:
    def __init__(self, address: str, credentials: tuple[str, str] | None = None) -> None:
        self.address = address
        self.client_id = f"raw-{uuid.uuid4().hex[:12]}"
        self.metadata = [
            ("x-mq-client-id", self.client_id),
            ("x-mq-language", "JAVA"),
            ("x-mq-client-version", "5.0.8"),
            ("x-mq-protocol", "GRPC_V2"),
        ]
        if credentials is not None:
            # what the 5.x clients send (python client util/signature.py, Java Signature)
            ak, sk = credentials
            when = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
            sig = hmac.new(sk.encode(), when.encode(), hashlib.sha1).hexdigest().upper()
            self.metadata += [
                ("x-mq-date-time", when),
                (
                    "authorization",
                    f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}",
                ),
            ]
        self.channel = grpc.aio.insecure_channel(address)
        self.stub = sgrpc.MessagingServiceStub(self.channel)
        self._telemetry: Any = None

    async def close(self) -> None:
        if self._telemetry is not None:
            self._telemetry.cancel()
        await self.channel.close()

    async def settings(self, settings: pb.Settings) -> spb.TelemetryCommand:
        """Open Telemetry, send ``settings`` and wait for the server's answer."""
        self._telemetry = self.stub.Telemetry(metadata=self.metadata)
        await self._telemetry.write(spb.TelemetryCommand(settings=settings))
        answer: spb.TelemetryCommand = await self._telemetry.read()
        return answer

    async def consumer_settings(
        self, group: str, topic: str, client_type: pb.ClientType.ValueType = pb.SIMPLE_CONSUMER
    ) -> spb.TelemetryCommand:
        return await self.settings(
            pb.Settings(
                client_type=client_type,
                request_timeout=duration(3),
                subscription=pb.Subscription(
                    group=pb.Resource(name=group),
                    subscriptions=[
                        pb.SubscriptionEntry(
                            topic=pb.Resource(name=topic),
                            expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                        )
                    ],
                ),
            )
        )

    def endpoints(self) -> pb.Endpoints:
        host, port = self.address.rsplit(":", 1)
        return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])

    async def heartbeat(
        self, group: str, client_type: pb.ClientType.ValueType = pb.SIMPLE_CONSUMER
    ) -> spb.HeartbeatResponse:
        return await self.stub.Heartbeat(
            spb.HeartbeatRequest(group=pb.Resource(name=group), client_type=client_type),
            metadata=self.metadata,
        )

    async def query_route(self, topic: str) -> spb.QueryRouteResponse:
        return await self.stub.QueryRoute(
            spb.QueryRouteRequest(topic=pb.Resource(name=topic), endpoints=self.endpoints()),
            metadata=self.metadata,
        )

    async def send(
        self, topic: str, body: bytes = b"raw", *, group: str | None = None, tag: str = ""
    ) -> spb.SendMessageResponse:
        sp = pb.SystemProperties(
            message_id=message_id(), message_type=pb.FIFO if group else pb.NORMAL
        )
        if group:
            sp.message_group = group
        if tag:
            sp.tag = tag
        msg = pb.Message(topic=pb.Resource(name=topic), system_properties=sp, body=body)
        return await self.stub.SendMessage(
            spb.SendMessageRequest(messages=[msg]), metadata=self.metadata
        )

    async def receive(
        self,
        group: str,
        topic: str,
        invisible_s: float,
        *,
        poll_s: float = 5,
        auto_renew: bool = False,
    ) -> list[spb.ReceiveMessageResponse]:
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=16,
            invisible_duration=duration(invisible_s),
            long_polling_timeout=duration(poll_s),
            auto_renew=auto_renew,
        )
        return [
            frame
            async for frame in self.stub.ReceiveMessage(
                request, metadata=self.metadata, timeout=poll_s + 20
            )
        ]

    async def ack(
        self, group: str, topic: str, handle: str, msg_id: str | None = None
    ) -> spb.AckMessageResponse:
        return await self.stub.AckMessage(
            spb.AckMessageRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=topic),
                entries=[
                    spb.AckMessageEntry(message_id=msg_id or message_id(), receipt_handle=handle)
                ],
            ),
            metadata=self.metadata,
        )

    async def change_invisible(
        self, group: str, topic: str, handle: str, seconds: float
    ) -> spb.ChangeInvisibleDurationResponse:
        return await self.stub.ChangeInvisibleDuration(
            spb.ChangeInvisibleDurationRequest(
                group=pb.Resource(name=group),
                topic=pb.Resource(name=topic),
                receipt_handle=handle,
                invisible_duration=duration(seconds),
                message_id=message_id(),
            ),
            metadata=self.metadata,
        )
