"""``apache.rocketmq.v2.MessagingService``: thin handlers (upstream ``grpc/v2/*Activity``) that
read the request, call a processor, and write the answer; every failure is answered in-band as a
``Status`` (a :class:`~ferrymq.proxy.errors.ProxyError`'s code, else INTERNAL_SERVER_ERROR), the
gRPC status staying OK, as upstream's proxy does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import timestamp_pb2

from ferrymq.acl.service import AclService
from ferrymq.message import MessageConst
from ferrymq.proxy import message_type as mt
from ferrymq.proxy import queue_selector as qs
from ferrymq.proxy import receipt_handle as rh
from ferrymq.proxy.backend import Backend, PopStatus, SendStatus
from ferrymq.proxy.config import ProxyConfig
from ferrymq.proxy.errors import Code, ProxyError
from ferrymq.proxy.grpc import auth, converter
from ferrymq.proxy.grpc.channels import TelemetryChannels
from ferrymq.proxy.grpc.context import RequestContext, request_context
from ferrymq.proxy.grpc.settings import ClientSettingsManager, settings_for_request
from ferrymq.proxy.grpc.validator import validate_group, validate_invisible_time, validate_topic
from ferrymq.proxy.processor.consumer import ConsumerProcessor, Filter, now_ms
from ferrymq.proxy.processor.producer import OutgoingMessage, ProducerProcessor, transaction_id_of
from ferrymq.proxy.processor.transaction import TransactionProcessor
from ferrymq.proxy.receipt_renewal import ReceiptHandleRenewer
from ferrymq.proxy.v2 import definition_pb2 as pb
from ferrymq.proxy.v2 import service_pb2 as spb
from ferrymq.proxy.v2 import service_pb2_grpc as sgrpc

log = logging.getLogger(__name__)

Ctx = grpc.aio.ServicerContext[Any, Any]
R = TypeVar("R")
# the first client version with ILLEGAL_POLLING_TIME (older ones get BAD_REQUEST)
ILLEGAL_POLLING_TIME_CLIENT_VERSION = "5.0.3"


def status(code: Code, message: str | None = None) -> pb.Status:
    return pb.Status(code=int(code), message=message or code.name)  # type: ignore[arg-type]


def status_of(exc: BaseException) -> pb.Status:
    if isinstance(exc, ProxyError):
        return status(exc.code, exc.message)
    log.error("internal server error", exc_info=exc)
    return status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")


def _ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def _permission(perm: int) -> pb.Permission.ValueType:
    readable, writable = bool(perm & qs.PERM_READ), bool(perm & qs.PERM_WRITE)
    if readable and writable:
        return pb.READ_WRITE
    if readable:
        return pb.READ
    if writable:
        return pb.WRITE
    return pb.NONE


class MessagingService(sgrpc.MessagingServiceServicer):
    def __init__(
        self,
        config: ProxyConfig,
        backend: Backend,
        producer: ProducerProcessor,
        consumer: ConsumerProcessor,
        transactions: TransactionProcessor,
        settings: ClientSettingsManager,
        channels: TelemetryChannels,
        renewer: ReceiptHandleRenewer,
        acl: AclService | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.producer = producer
        self.consumer = consumer
        self.transactions = transactions
        self.settings = settings
        self.channels = channels
        self.renewer = renewer
        self.acl = acl

    def _consumer_call(self, context: Ctx, topic: str, group: str) -> None:
        """The checks of every consumer call: names, then the ACL (SUB on topic and group)."""
        validate_topic(topic)
        validate_group(group)
        self._authorize(request_context(context), auth.subscribe(topic, group))

    def _authorize(self, ctx: RequestContext, needed: auth.Needed) -> None:
        """UNAUTHORIZED unless the ACL (when enabled) admits the call (see grpc/auth.py)."""
        if self.acl is None:
            return
        refusal = auth.decide(self.acl.table, ctx.remote, ctx.metadata, needed)
        if refusal is not None:
            self.acl.refused[(0, refusal.reason)] += 1
            raise ProxyError(Code.UNAUTHORIZED, refusal.remark)

    async def _answer(
        self, work: Callable[[], Awaitable[R]], failed: Callable[[pb.Status], R]
    ) -> R:
        try:
            return await work()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return failed(status_of(exc))

    # --- route ---------------------------------------------------------------------------------
    def _endpoints(self, endpoints: pb.Endpoints) -> pb.Endpoints:
        """The client's own access point, with the proxy's port (upstream convertToAddressList)."""
        port = self.config.grpc_server_port
        return pb.Endpoints(
            scheme=endpoints.scheme,
            addresses=[pb.Address(host=a.host, port=port or a.port) for a in endpoints.addresses],
        )

    async def QueryRoute(
        self, request: spb.QueryRouteRequest, context: Ctx
    ) -> spb.QueryRouteResponse:
        async def work() -> spb.QueryRouteResponse:
            topic = request.topic.name
            validate_topic(topic)
            self._authorize(request_context(context), [])
            route = await self.backend.topic_route(topic)
            topic_type = await self.backend.topic_message_type(topic)
            accept = [converter.message_type_pb(t) for t in mt.accepted(topic_type)]
            endpoints = self._endpoints(request.endpoints)
            queues: list[pb.MessageQueue] = []
            brokers = {b.broker_name: b for b in route.broker_datas}
            for qd in route.queue_datas:
                data = brokers.get(qd.broker_name)
                if data is None:
                    break
                for broker_id in data.broker_addrs:
                    broker = pb.Broker(name=qd.broker_name, id=broker_id, endpoints=endpoints)
                    queues.extend(_queues_of(qd, request.topic, broker, accept))
            return spb.QueryRouteResponse(status=status(Code.OK), message_queues=queues)

        return await self._answer(work, lambda s: spb.QueryRouteResponse(status=s))

    async def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: Ctx
    ) -> spb.QueryAssignmentResponse:
        async def work() -> spb.QueryAssignmentResponse:
            self._consumer_call(context, request.topic.name, request.group.name)
            route = await self.backend.topic_route(request.topic.name)
            group = await self.backend.group_config(request.group.name)
            fifo = group is not None and group.consume_message_orderly
            endpoints = self._endpoints(request.endpoints)
            masters = {b.broker_name for b in route.broker_datas if 0 in b.broker_addrs}
            out: list[pb.Assignment] = []
            for qd in route.queue_datas:
                if not (qd.perm & qs.PERM_READ and qd.read_queue_nums > 0):
                    continue
                if qd.broker_name not in masters:
                    continue
                broker = pb.Broker(name=qd.broker_name, id=0, endpoints=endpoints)
                ids = range(qd.read_queue_nums) if fifo else [-1]
                out.extend(
                    pb.Assignment(
                        message_queue=pb.MessageQueue(
                            topic=request.topic,
                            id=i,
                            permission=_permission(qd.perm),
                            broker=broker,
                        )
                    )
                    for i in ids
                )
            if not out:
                return spb.QueryAssignmentResponse(
                    status=status(Code.FORBIDDEN, "no readable queue")
                )
            return spb.QueryAssignmentResponse(status=status(Code.OK), assignments=out)

        return await self._answer(work, lambda s: spb.QueryAssignmentResponse(status=s))

    # --- clients -------------------------------------------------------------------------------
    async def Heartbeat(self, request: spb.HeartbeatRequest, context: Ctx) -> spb.HeartbeatResponse:
        async def work() -> spb.HeartbeatResponse:
            ctx = request_context(context)
            self._authorize(ctx, [])
            raw = self.settings.raw(ctx.client_id)
            if raw is None:
                if request.client_type in (
                    pb.PUSH_CONSUMER,
                    pb.SIMPLE_CONSUMER,
                ) and request.HasField("group"):
                    # a consumer that heartbeats before its settings arrived: known by its group
                    validate_group(request.group.name)
                    return spb.HeartbeatResponse(status=status(Code.OK))
                return spb.HeartbeatResponse(
                    status=status(
                        Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"
                    )
                )
            if raw.client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
                validate_group(request.group.name)
            elif raw.client_type != pb.PRODUCER:
                return spb.HeartbeatResponse(
                    status=status(
                        Code.UNRECOGNIZED_CLIENT_TYPE, pb.ClientType.Name(raw.client_type)
                    )
                )
            return spb.HeartbeatResponse(status=status(Code.OK))

        return await self._answer(work, lambda s: spb.HeartbeatResponse(status=s))

    async def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: Ctx
    ) -> spb.NotifyClientTerminationResponse:
        async def work() -> spb.NotifyClientTerminationResponse:
            ctx = request_context(context)
            self._authorize(ctx, [])
            raw = self.settings.remove(ctx.client_id)
            self.channels.drop(ctx.client_id)
            self.renewer.clear_client(ctx.client_id)
            await self._update_producer_groups()
            if raw is None:
                return spb.NotifyClientTerminationResponse(
                    status=status(
                        Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"
                    )
                )
            if raw.client_type in (pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER):
                validate_group(request.group.name)
            return spb.NotifyClientTerminationResponse(status=status(Code.OK))

        return await self._answer(work, lambda s: spb.NotifyClientTerminationResponse(status=s))

    async def _update_producer_groups(self) -> None:
        """Transactional topics in use are the producer groups the brokers check with."""
        groups = set()
        for topic in self.settings.published_topics():
            try:
                if await self.backend.topic_message_type(topic) in (
                    mt.TopicMessageType.TRANSACTION,
                    mt.TopicMessageType.MIXED,
                ):
                    groups.add(topic)
            except ProxyError:
                continue
        self.backend.set_producer_groups(groups)

    async def _settings_answer(
        self, ctx: RequestContext, command: spb.TelemetryCommand
    ) -> spb.TelemetryCommand:
        settings = command.settings
        self._authorize(ctx, [])
        if settings.HasField("publishing"):
            for topic in settings.publishing.topics:
                validate_topic(topic.name)
        elif settings.HasField("subscription"):
            validate_group(settings.subscription.group.name)
        else:
            raise ProxyError(
                Code.BAD_REQUEST, "there is no publishing or subscription data in settings"
            )
        self.settings.update(ctx.client_id, settings)
        group = (
            await self.backend.group_config(settings.subscription.group.name)
            if settings.HasField("subscription")
            else None
        )
        if settings.HasField("publishing"):
            await self._update_producer_groups()
        return spb.TelemetryCommand(
            status=status(Code.OK), settings=self.settings.merged(settings, group)
        )

    async def Telemetry(
        self, request_iterator: AsyncIterator[spb.TelemetryCommand], context: Ctx
    ) -> AsyncIterator[spb.TelemetryCommand]:
        ctx = request_context(context)
        box = self.channels.open(ctx.client_id)

        async def read() -> None:
            try:
                async for command in request_iterator:
                    if command.HasField("settings"):
                        try:
                            answer = await self._settings_answer(ctx, command)
                        except ProxyError as exc:
                            answer = spb.TelemetryCommand(status=status(exc.code, exc.message))
                        box.put_nowait(answer)
                    # thread stack traces and verify results answer relays ferrymq does not make
            finally:
                box.put_nowait(None)

        reader = asyncio.create_task(read(), name=f"telemetry-{ctx.client_id}")
        try:
            while True:
                item = await box.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            self.channels.close(ctx.client_id, box)

    # --- producer ------------------------------------------------------------------------------
    async def SendMessage(
        self, request: spb.SendMessageRequest, context: Ctx
    ) -> spb.SendMessageResponse:
        async def work() -> spb.SendMessageResponse:
            ctx = request_context(context)
            if not request.messages:
                raise ProxyError(Code.MESSAGE_CORRUPTED, "no message to send")
            topic = request.messages[0].topic
            validate_topic(topic.name)
            self._authorize(ctx, auth.publish(topic.name))
            now = now_ms()
            outgoing = []
            for pm in request.messages:
                if pm.topic != topic:
                    raise ProxyError(Code.MESSAGE_CORRUPTED, "topic in message is not same")
                props = converter.build_properties(pm, topic.name, self.config, ctx.remote, now)
                outgoing.append(OutgoingMessage(pm.body, props, converter.sys_flag_of(pm)))
            results = await self.producer.send(topic.name, outgoing)
            entries = []
            for m, r in zip(outgoing, results, strict=True):
                if r.status is SendStatus.SEND_OK:
                    entries.append(
                        spb.SendResultEntry(
                            status=status(Code.OK),
                            message_id=m.properties[
                                MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
                            ],
                            transaction_id=transaction_id_of(r),
                            offset=r.queue_offset,
                            recall_handle=r.recall_handle or "",
                        )
                    )
                else:
                    code = {
                        SendStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
                        SendStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
                        SendStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
                    }[r.status]
                    entries.append(
                        spb.SendResultEntry(
                            status=status(code, f"send message failed, sendStatus={r.status.value}")
                        )
                    )
            codes = {e.status.code for e in entries}
            top = status(Code(codes.pop())) if len(codes) == 1 else status(Code.MULTIPLE_RESULTS)
            return spb.SendMessageResponse(status=top, entries=entries)

        return await self._answer(work, lambda s: spb.SendMessageResponse(status=s))

    async def EndTransaction(
        self, request: spb.EndTransactionRequest, context: Ctx
    ) -> spb.EndTransactionResponse:
        async def work() -> spb.EndTransactionResponse:
            validate_topic(request.topic.name)
            self._authorize(request_context(context), auth.publish(request.topic.name))
            if not request.transaction_id:
                raise ProxyError(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
            if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
                return spb.EndTransactionResponse(status=status(Code.OK))
            await self.transactions.end(
                request.topic.name,
                request.transaction_id,
                request.message_id,
                commit=request.resolution == pb.COMMIT,
                from_check=request.source == pb.SOURCE_SERVER_CHECK,
            )
            return spb.EndTransactionResponse(status=status(Code.OK))

        return await self._answer(work, lambda s: spb.EndTransactionResponse(status=s))

    async def RecallMessage(
        self, request: spb.RecallMessageRequest, context: Ctx
    ) -> spb.RecallMessageResponse:
        async def work() -> spb.RecallMessageResponse:
            from ferrymq.proxy.recall import broker_of_handle
            from ferrymq.remoting import headers

            validate_topic(request.topic.name)
            self._authorize(request_context(context), auth.publish(request.topic.name))
            broker = broker_of_handle(request.recall_handle)
            msg_id = await self.backend.recall(
                broker,
                headers.RecallMessageRequestHeader(
                    topic=request.topic.name,
                    recall_handle=request.recall_handle,
                    producer_group=request.topic.name,
                ),
            )
            return spb.RecallMessageResponse(status=status(Code.OK), message_id=msg_id)

        return await self._answer(work, lambda s: spb.RecallMessageResponse(status=s))

    # --- consumer ------------------------------------------------------------------------------
    async def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: Ctx
    ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        try:
            frames = await self._receive(request, context)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            frames = [spb.ReceiveMessageResponse(status=status_of(exc))]
        for frame in frames:
            yield frame
        yield spb.ReceiveMessageResponse(delivery_timestamp=_timestamp(now_ms()))

    async def _receive(
        self, request: spb.ReceiveMessageRequest, context: Ctx
    ) -> list[spb.ReceiveMessageResponse]:
        ctx = request_context(context)
        cfg = self.config
        group_name = request.group.name
        raw = self.settings.raw(ctx.client_id)
        if raw is None or not raw.HasField("subscription"):
            # served from the request itself (upstream fails with a NullPointerException)
            raw = settings_for_request(
                group_name, pb.PUSH_CONSUMER if request.auto_renew else pb.SIMPLE_CONSUMER
            )
        validate_topic(request.message_queue.topic.name)
        validate_group(group_name)
        self._authorize(ctx, auth.subscribe(request.message_queue.topic.name, group_name))
        group = await self.backend.group_config(group_name)
        settings = self.settings.merged(raw, group)
        remaining = ctx.remaining_ms
        if request.HasField("long_polling_timeout"):
            polling = _ms(request.long_polling_timeout)
        else:
            polling = remaining - _ms(settings.request_timeout) // 2
        polling = max(polling, cfg.grpc_client_consumer_min_long_polling_timeout_millis)
        polling = min(polling, cfg.grpc_client_consumer_max_long_polling_timeout_millis)
        if polling > remaining:
            if remaining >= cfg.grpc_client_consumer_min_long_polling_timeout_millis:
                polling = remaining
            else:
                old = (
                    ctx.client_version is None
                    or ctx.client_version < ILLEGAL_POLLING_TIME_CLIENT_VERSION
                )
                raise ProxyError(
                    Code.BAD_REQUEST if old else Code.ILLEGAL_POLLING_TIME,
                    "The deadline time remaining is not enough for polling, please check network condition",
                )
        renew = cfg.enable_proxy_auto_renew and request.auto_renew
        if renew:
            invisible = cfg.default_invisible_time_mills
        else:
            invisible = _ms(request.invisible_duration)
            validate_invisible_time(
                invisible, cfg.min_invisible_time_mills_for_recv, cfg.max_invisible_time_mills
            )
        expr = request.filter_expression
        flt = Filter("SQL92" if expr.type == pb.SQL else "TAG", expr.expression or "*")
        outcome = await self.consumer.pop(
            broker_name=request.message_queue.broker.name or await self._any_broker(request),
            group=group_name,
            topic=request.message_queue.topic.name,
            batch=request.batch_size,
            invisible_ms=invisible,
            poll_ms=polling,
            flt=flt,
            fifo=settings.subscription.fifo,
            max_attempts=settings.backoff_policy.max_attempts,
            attempt_id=request.attempt_id if request.HasField("attempt_id") else None,
            # as upstream's proxy, the broker may use the call's whole remaining deadline: a POP
            # through ferrymq's proxy to Apache's broker timed out at polling + 3 s (8 s) in
            # full runs, while the client still waited
            timeout_s=max(remaining / 1000, polling / 1000 + 3.0),
        )
        if outcome.status is PopStatus.POLLING_FULL:
            return [
                spb.ReceiveMessageResponse(status=status(Code.TOO_MANY_REQUESTS, "polling full"))
            ]
        if outcome.status is not PopStatus.FOUND:
            return [
                spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            ]
        if not outcome.messages:
            return [
                spb.ReceiveMessageResponse(
                    status=status(Code.MESSAGE_NOT_FOUND, "no match message")
                )
            ]
        if renew:
            for m in outcome.messages:
                self.renewer.add(
                    ctx.client_id,
                    group_name,
                    request.message_queue.topic.name,
                    m.uniq_key or m.msg_id,
                    m.properties[rh.PROPERTY_POP_CK],
                    m.reconsume_times,
                )
        now = now_ms()
        return [spb.ReceiveMessageResponse(status=status(Code.OK))] + [
            spb.ReceiveMessageResponse(message=converter.to_v2_message(m, now))
            for m in outcome.messages
        ]

    async def _any_broker(self, request: spb.ReceiveMessageRequest) -> str:
        route = await self.backend.topic_route(request.message_queue.topic.name)
        names = qs.readable_brokers(route)
        if not names:
            raise ProxyError(Code.FORBIDDEN, "no readable queue")
        return names[0]

    async def AckMessage(
        self, request: spb.AckMessageRequest, context: Ctx
    ) -> spb.AckMessageResponse:
        async def work() -> spb.AckMessageResponse:
            self._consumer_call(context, request.topic.name, request.group.name)
            client_id = request_context(context).client_id
            entries = []
            for entry in request.entries:
                try:
                    await self.consumer.ack(
                        request.group.name,
                        request.topic.name,
                        await self.renewer.take(
                            client_id, request.group.name, entry.message_id, entry.receipt_handle
                        ),
                        entry.message_id,
                    )
                    st = status(Code.OK)
                except ProxyError as exc:
                    st = status(exc.code, exc.message)
                entries.append(
                    spb.AckMessageResultEntry(
                        message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=st
                    )
                )
            codes = {e.status.code for e in entries}
            if len(codes) == 1:
                top = status(Code(codes.pop()))
            elif not codes:
                top = status(Code.OK)
            else:
                top = status(Code.MULTIPLE_RESULTS)
            return spb.AckMessageResponse(status=top, entries=entries)

        return await self._answer(work, lambda s: spb.AckMessageResponse(status=s))

    async def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: Ctx
    ) -> spb.ChangeInvisibleDurationResponse:
        async def work() -> spb.ChangeInvisibleDurationResponse:
            self._consumer_call(context, request.topic.name, request.group.name)
            invisible = _ms(request.invisible_duration)
            validate_invisible_time(invisible, 0, self.config.max_invisible_time_mills)
            held = await self.renewer.take(
                request_context(context).client_id,
                request.group.name,
                request.message_id,
                request.receipt_handle,
            )
            handle = await self.consumer.change_invisible_time(
                request.group.name, request.topic.name, held, invisible
            )
            return spb.ChangeInvisibleDurationResponse(
                status=status(Code.OK), receipt_handle=handle
            )

        return await self._answer(work, lambda s: spb.ChangeInvisibleDurationResponse(status=s))

    async def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: Ctx
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        async def work() -> spb.ForwardMessageToDeadLetterQueueResponse:
            self._consumer_call(context, request.topic.name, request.group.name)
            held = await self.renewer.take(
                request_context(context).client_id,
                request.group.name,
                request.message_id,
                request.receipt_handle,
            )
            await self.consumer.forward_to_dlq(
                request.group.name, request.topic.name, held, request.message_id
            )
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status(Code.OK))

        return await self._answer(
            work, lambda s: spb.ForwardMessageToDeadLetterQueueResponse(status=s)
        )

    # --- not served, as upstream's proxy serves them not (its application has no handlers) ---
    async def _unimplemented(self, context: Ctx, name: str) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {name}")

    async def PullMessage(  # type: ignore[override]
        self, request: spb.PullMessageRequest, context: Ctx
    ) -> AsyncIterator[spb.PullMessageResponse]:
        await self._unimplemented(context, "PullMessage")
        yield spb.PullMessageResponse()  # never reached: abort raises

    async def UpdateOffset(
        self, request: spb.UpdateOffsetRequest, context: Ctx
    ) -> spb.UpdateOffsetResponse:
        return await self._unimplemented(context, "UpdateOffset")  # type: ignore[no-any-return]

    async def GetOffset(self, request: spb.GetOffsetRequest, context: Ctx) -> spb.GetOffsetResponse:
        return await self._unimplemented(context, "GetOffset")  # type: ignore[no-any-return]

    async def QueryOffset(
        self, request: spb.QueryOffsetRequest, context: Ctx
    ) -> spb.QueryOffsetResponse:
        return await self._unimplemented(context, "QueryOffset")  # type: ignore[no-any-return]

    async def SyncLiteSubscription(
        self, request: spb.SyncLiteSubscriptionRequest, context: Ctx
    ) -> spb.SyncLiteSubscriptionResponse:
        return await self._unimplemented(context, "SyncLiteSubscription")  # type: ignore[no-any-return]


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _queues_of(
    qd: Any, topic: pb.Resource, broker: pb.Broker, accept: list[pb.MessageType.ValueType]
) -> list[pb.MessageQueue]:
    """RouteActivity.genMessageQueueFromQueueData: read-only, write-only, read-write and
    inaccessible queues numbered in that order."""
    readable, writable = bool(qd.perm & qs.PERM_READ), bool(qd.perm & qs.PERM_WRITE)
    r = w = rw = n = 0
    if readable and writable:
        rw = min(qd.write_queue_nums, qd.read_queue_nums)
        r = qd.read_queue_nums - rw
        w = qd.write_queue_nums - rw
    elif writable:
        w = qd.write_queue_nums
    elif readable:
        r = qd.read_queue_nums
    else:
        n = max(1, qd.write_queue_nums, qd.read_queue_nums)
    out: list[pb.MessageQueue] = []
    for count, perm in ((r, pb.READ), (w, pb.WRITE), (rw, pb.READ_WRITE), (n, pb.NONE)):
        for _ in range(count):
            out.append(
                pb.MessageQueue(
                    topic=topic,
                    id=len(out),
                    permission=perm,
                    broker=broker,
                    accept_message_types=accept,
                )
            )
    return out
