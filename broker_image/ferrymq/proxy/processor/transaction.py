"""Transactions (upstream ``TransactionProcessor`` + ``TransactionDataManager``): where each
half message lives, remembered at send (and at a broker's check), so that EndTransaction can be
sent to its broker with its offsets."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ferrymq.message import MessageSysFlag
from ferrymq.proxy.backend import Backend
from ferrymq.proxy.errors import Code, ProxyError
from ferrymq.remoting import headers

# a half message's data is kept this long after its send or last check (upstream keeps it for
# the transaction timeout plus checks; a late EndTransaction is answered by the check instead)
KEEP_S = 3600.0


@dataclass(frozen=True, slots=True)
class TransactionData:
    broker_name: str
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str
    checked: bool


class TransactionDataManager:
    def __init__(self) -> None:
        self._data: dict[tuple[str, str], tuple[float, TransactionData]] = {}

    def add(self, group: str, transaction_id: str, data: TransactionData) -> None:
        now = time.monotonic()
        self._data[(group, transaction_id)] = (now, data)
        if len(self._data) > 10_000:
            for key, (at, _) in list(self._data.items()):
                if now - at > KEEP_S:
                    del self._data[key]

    def pop(self, group: str, transaction_id: str) -> TransactionData | None:
        item = self._data.pop((group, transaction_id), None)
        return item[1] if item is not None else None


class TransactionProcessor:
    def __init__(self, backend: Backend, data: TransactionDataManager) -> None:
        self.backend = backend
        self.data = data

    async def end(
        self, group: str, transaction_id: str, message_id: str, commit: bool, from_check: bool
    ) -> None:
        data = self.data.pop(group, transaction_id)
        if data is None:
            raise ProxyError(
                Code.INTERNAL_SERVER_ERROR,
                f"transaction data not found: group {group}, transaction id {transaction_id}",
            )
        header = headers.EndTransactionRequestHeader(
            producer_group=group,
            tran_state_table_offset=data.tran_state_table_offset,
            commit_log_offset=data.commit_log_offset,
            commit_or_rollback=(
                MessageSysFlag.TRANSACTION_COMMIT_TYPE
                if commit
                else MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
            ),
            msg_id=message_id or data.msg_id,
            from_transaction_check=from_check,
            transaction_id=transaction_id,
        )
        await self.backend.end_transaction(data.broker_name, header)
