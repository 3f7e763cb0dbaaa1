"""Telemetry channels (upstream ``GrpcChannelManager``/``GrpcClientChannel``): the open Telemetry
stream of each client, through which the proxy sends server-to-client commands (settings
answers, RecoverOrphanedTransactionCommand), and the relay of a broker's transaction check to a
producer of the half message's topic."""

from __future__ import annotations

import asyncio
import itertools
import logging

from ferrymq.message import MessageConst, MessageExt
from ferrymq.proxy.grpc.converter import to_v2_message
from ferrymq.proxy.grpc.settings import ClientSettingsManager
from ferrymq.proxy.processor.consumer import now_ms
from ferrymq.proxy.processor.transaction import TransactionData, TransactionDataManager
from ferrymq.proxy.v2 import service_pb2 as spb
from ferrymq.remoting import headers

log = logging.getLogger(__name__)

Outbox = asyncio.Queue[spb.TelemetryCommand | None]


class TelemetryChannels:
    def __init__(self) -> None:
        self._outboxes: dict[str, Outbox] = {}

    def open(self, client_id: str) -> Outbox:
        """A new stream of ``client_id`` replaces its previous one (which is ended)."""
        old = self._outboxes.get(client_id)
        if old is not None:
            old.put_nowait(None)
        box: Outbox = asyncio.Queue()
        self._outboxes[client_id] = box
        return box

    def close(self, client_id: str, box: Outbox) -> None:
        if self._outboxes.get(client_id) is box:
            del self._outboxes[client_id]

    def drop(self, client_id: str) -> None:
        box = self._outboxes.pop(client_id, None)
        if box is not None:
            box.put_nowait(None)

    def send(self, client_id: str, command: spb.TelemetryCommand) -> bool:
        box = self._outboxes.get(client_id)
        if box is None:
            return False
        box.put_nowait(command)
        return True

    def connected(self, client_id: str) -> bool:
        return client_id in self._outboxes

    def close_all(self) -> None:
        for box in self._outboxes.values():
            box.put_nowait(None)
        self._outboxes.clear()


class TransactionCheckRelay:
    """Hands a broker's CHECK_TRANSACTION_STATE to one producer of the topic (round robin)."""

    def __init__(
        self,
        channels: TelemetryChannels,
        settings: ClientSettingsManager,
        transactions: TransactionDataManager,
    ) -> None:
        self.channels = channels
        self.settings = settings
        self.transactions = transactions
        self._turn = itertools.count()

    async def __call__(
        self, broker_name: str, header: headers.CheckTransactionStateRequestHeader, msg: MessageExt
    ) -> None:
        group = msg.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP) or msg.topic
        tx_id = header.transaction_id or msg.properties.get(
            MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""
        )
        self.transactions.add(
            group,
            tx_id,
            TransactionData(
                broker_name=broker_name,
                tran_state_table_offset=header.tran_state_table_offset,
                commit_log_offset=header.commit_log_offset,
                msg_id=header.msg_id or "",
                checked=True,
            ),
        )
        clients = [c for c in self.settings.producers_of(group) if self.channels.connected(c)]
        if not clients:
            log.warning("transaction check of %s: no producer of %s is connected", tx_id, group)
            return
        client = clients[next(self._turn) % len(clients)]
        command = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=to_v2_message(msg, now_ms()), transaction_id=tx_id
            )
        )
        self.channels.send(client, command)
