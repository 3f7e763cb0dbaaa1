"""A stored message stored again under another address.

The schedule, retry and transaction services move messages between topics (a delayed message to
its real topic, a failed one to its retry topic or DLQ, a half message to its real topic or the op
topic): flag, born time and born host are kept, the body as the producer sent it.
"""

from __future__ import annotations

import zlib
from typing import Protocol

from ferrymq.message import (
    MessageConst,
    MessageExt,
    MessageInner,
    MessageSysFlag,
    encode_properties,
    tags_string_to_tags_code,
)

__all__ = ["StoredMessage", "restored_message", "stored_body"]


def stored_body(msg: MessageExt) -> tuple[bytes, int]:
    """Body and sysFlag of a looked-up message, fit to be stored again as they were sent.

    ``look_message_by_offset`` inflates compressed bodies but keeps COMPRESSED_FLAG; re-deflate so
    the copy is byte-for-byte what the producer sent (consumers inflate it on receipt). A flagged
    body that is not a zlib stream was already plain, so the flag is dropped instead.
    """
    sys_flag = msg.sys_flag
    if not sys_flag & MessageSysFlag.COMPRESSED_FLAG:
        return msg.body, sys_flag
    try:
        zlib.decompress(msg.body)
    except zlib.error:
        return zlib.compress(msg.body, 5), sys_flag
    return msg.body, sys_flag


class StoredMessage(Protocol):
    """What a stored message keeps when it is stored again (a MessageExt or a DecodedRecord)."""

    @property
    def flag(self) -> int: ...
    @property
    def born_timestamp(self) -> int: ...
    @property
    def born_host(self) -> tuple[str, int]: ...
    @property
    def reconsume_times(self) -> int: ...


def restored_message(
    src: StoredMessage,
    *,
    topic: str,
    queue_id: int,
    body: bytes,
    properties: dict[str, str],
    sys_flag: int,
    reconsume_times: int | None = None,
    prepared_transaction_offset: int = 0,
) -> MessageInner:
    """``src`` stored again under another address (the schedule, retry and transaction services
    move messages between topics): flag and born time/host kept, the properties string and tags
    code derived from ``properties``."""
    return MessageInner(
        topic=topic,
        queue_id=queue_id,
        body=body,
        flag=src.flag,
        properties=properties,
        properties_string=encode_properties(properties),
        tags_code=tags_string_to_tags_code(properties.get(MessageConst.PROPERTY_TAGS)),
        sys_flag=sys_flag,
        born_timestamp=src.born_timestamp,
        born_host=src.born_host,
        reconsume_times=src.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )
