"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): translate bodies to :class:`RebalanceLockManager`.

Upstream ``AdminBrokerProcessor.lockBatchMQ`` / ``unlockBatchMQ``: the request body names the group,
the client id and a set of queues; the LOCK answer lists the queues now locked by that client.
"""

from __future__ import annotations

from ferrymq.broker.lock_manager import QueueKey, RebalanceLockManager
from ferrymq.remoting.bodies import (
    BodyError,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    UnlockBatchRequestBody,
)
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.server import RemotingServer

__all__ = ["RebalanceLockProcessor"]


def _key(mq: MessageQueue) -> QueueKey:
    return (mq.topic, mq.broker_name, mq.queue_id)


class RebalanceLockProcessor:
    def __init__(self, locks: RebalanceLockManager) -> None:
        self.locks = locks

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.LOCK_BATCH_MQ, self.lock_batch)
        server.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock_batch)

    def lock_batch(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            body = LockBatchRequestBody.decode(request.body_bytes())
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        wanted = {_key(mq): mq for mq in body.mq_set}
        locked = self.locks.try_lock_batch(body.consumer_group, wanted, body.client_id)
        answer = LockBatchResponseBody(lock_ok_mq_set=[wanted[k] for k in sorted(locked)])
        return request.response(ResponseCode.SUCCESS, None, body=answer.encode())

    def unlock_batch(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            body = UnlockBatchRequestBody.decode(request.body_bytes())
        except BodyError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        self.locks.unlock_batch(
            body.consumer_group, [_key(mq) for mq in body.mq_set], body.client_id
        )
        return request.response(ResponseCode.SUCCESS)
