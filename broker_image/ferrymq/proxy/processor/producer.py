"""Sending (upstream ``ProducerProcessor``): topic message-type check, queue choice, the send, and
the transaction data a later EndTransaction needs; forwarding a message to its DLQ."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from ferrymq.message import MessageConst, MessageSysFlag, decode_message_id, encode_properties
from ferrymq.proxy import message_type as mt
from ferrymq.proxy import queue_selector as qs
from ferrymq.proxy.backend import Backend, SendOutcome, SendStatus
from ferrymq.proxy.config import ProxyConfig
from ferrymq.proxy.errors import Code, ProxyError
from ferrymq.proxy.processor.transaction import TransactionData, TransactionDataManager
from ferrymq.proxy.receipt_handle import ReceiptHandle
from ferrymq.remoting import headers

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    body: bytes
    properties: dict[str, str]
    sys_flag: int


class ProducerProcessor:
    def __init__(
        self, config: ProxyConfig, backend: Backend, transactions: TransactionDataManager
    ) -> None:
        self.config = config
        self.backend = backend
        self.transactions = transactions
        self._round_robin = itertools.count()

    async def send(self, topic: str, messages: list[OutgoingMessage]) -> list[SendOutcome]:
        """Every message of one request goes to one queue (upstream's selector looks at the
        first); the messages are sent one by one, each answered."""
        if self.config.enable_topic_message_type_check and not topic.startswith(
            (RETRY_PREFIX, DLQ_PREFIX)
        ):
            expected = await self.backend.topic_message_type(topic)
            for m in messages:
                mt.validate(expected, mt.of_properties(m.properties))
        route = await self.backend.topic_route(topic)
        queues = qs.write_queues(route)
        if not queues:
            raise ProxyError(Code.FORBIDDEN, f"no writable queue for topic {topic}")
        group = messages[0].properties.get(MessageConst.PROPERTY_SHARDING_KEY)
        if group and len(messages) == 1:
            queue = qs.for_message_group(queues, group)
        else:
            queue = queues[next(self._round_robin) % len(queues)]
        out: list[SendOutcome] = []
        for m in messages:
            producer_group = m.properties.get(MessageConst.PROPERTY_PRODUCER_GROUP, topic)
            header = headers.SendMessageRequestHeader(
                producer_group=producer_group,
                topic=topic,
                queue_id=queue.queue_id,
                sys_flag=m.sys_flag,
                born_timestamp=int(time.time() * 1000),
                flag=0,
                properties=encode_properties(m.properties),
                reconsume_times=0,
            )
            outcome = await self.backend.send(queue.broker_name, header, m.body)
            tx_type = MessageSysFlag.get_transaction_value(m.sys_flag)
            if (
                outcome.status is SendStatus.SEND_OK
                and tx_type == MessageSysFlag.TRANSACTION_PREPARED_TYPE
            ):
                self._remember(producer_group, queue.broker_name, outcome, m)
            out.append(outcome)
        return out

    def _remember(
        self, group: str, broker_name: str, outcome: SendOutcome, m: OutgoingMessage
    ) -> None:
        try:
            commit_log_offset = decode_message_id(outcome.msg_id)[2]
        except ValueError:
            return
        uniq = m.properties.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, "")
        self.transactions.add(
            group,
            transaction_id_of(outcome),
            TransactionData(
                broker_name=broker_name,
                tran_state_table_offset=outcome.queue_offset,
                commit_log_offset=commit_log_offset,
                msg_id=uniq,
                checked=False,
            ),
        )

    async def forward_to_dlq(
        self, handle: ReceiptHandle, message_id: str, group: str, topic: str
    ) -> None:
        """CONSUMER_SEND_MSG_BACK with delayLevel -1 (straight to %DLQ%group), then the ack."""
        if handle.commit_log_offset < 0:
            raise ProxyError(Code.INVALID_RECEIPT_HANDLE, "commit log offset is empty")
        await self.backend.send_back(
            handle.broker_name,
            headers.ConsumerSendMsgBackRequestHeader(
                offset=handle.commit_log_offset,
                group=group,
                delay_level=-1,
                origin_msg_id=message_id,
                origin_topic=handle.real_topic(topic, group),
                max_reconsume_times=0,
            ),
        )


def transaction_id_of(outcome: SendOutcome) -> str:
    """The id the client ends the transaction with: the broker's, else the offset msgId."""
    return outcome.transaction_id or outcome.msg_id
