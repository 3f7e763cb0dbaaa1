"""END_TRANSACTION (37): the producer's commit or rollback of a half message.

Translation only: header -> :meth:`TransactionService.end_transaction` -> response. Clients send it
oneway (the channel then drops the response); a slave refuses it, as it cannot write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ferrymq.broker.transaction import TransactionService
from ferrymq.remoting.channel import Channel
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.headers import EndTransactionRequestHeader, HeaderError
from ferrymq.remoting.server import RemotingServer

__all__ = ["EndTransactionProcessor"]

log = logging.getLogger(__name__)


class EndTransactionProcessor:
    def __init__(
        self, service: TransactionService, *, is_slave: Callable[[], bool] = lambda: False
    ) -> None:
        self.service = service
        self.is_slave = is_slave

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.END_TRANSACTION, self.handle)

    async def handle(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        if self.is_slave():
            return request.response(
                ResponseCode.SLAVE_NOT_AVAILABLE,
                "this broker is a slave: end transactions on the master",
            )
        try:
            header = EndTransactionRequestHeader.from_ext(request.ext_fields)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        outcome = await self.service.end_transaction(header)
        if outcome.code != ResponseCode.SUCCESS:
            # clients send END_TRANSACTION oneway: the log is the only place this shows
            log.warning(
                "END_TRANSACTION from %s (group %s, offset %d) refused: %s",
                channel.remote_addr,
                header.producer_group,
                header.commit_log_offset,
                outcome.remark,
            )
        return request.response(outcome.code, outcome.remark)
