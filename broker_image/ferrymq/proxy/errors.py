"""The proxy's failure: a v2 ``Code`` and a message, answered in-band as ``Status{code, message}``
(upstream ``ProxyException`` / ``GrpcProxyException``); and the map from a broker's remoting
response code to a v2 code (upstream ``ResponseBuilder.RESPONSE_CODE_MAPPING``)."""

from __future__ import annotations

import enum

from ferrymq.remoting.codes import ResponseCode


class Code(enum.IntEnum):
    """The v2 ``Code`` numbers the proxy answers with (apache/rocketmq-apis definition.proto)."""

    OK = 20000
    MULTIPLE_RESULTS = 30000
    BAD_REQUEST = 40000
    ILLEGAL_ACCESS_POINT = 40001
    ILLEGAL_TOPIC = 40002
    ILLEGAL_CONSUMER_GROUP = 40003
    ILLEGAL_MESSAGE_TAG = 40004
    ILLEGAL_MESSAGE_KEY = 40005
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    INVALID_TRANSACTION_ID = 40008
    ILLEGAL_MESSAGE_ID = 40009
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_INVISIBLE_TIME = 40011
    ILLEGAL_DELIVERY_TIME = 40012
    INVALID_RECEIPT_HANDLE = 40013
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
    UNRECOGNIZED_CLIENT_TYPE = 40015
    MESSAGE_CORRUPTED = 40016
    CLIENT_ID_REQUIRED = 40017
    ILLEGAL_POLLING_TIME = 40018
    UNAUTHORIZED = 40100
    FORBIDDEN = 40300
    NOT_FOUND = 40400
    MESSAGE_NOT_FOUND = 40401
    TOPIC_NOT_FOUND = 40402
    CONSUMER_GROUP_NOT_FOUND = 40403
    REQUEST_TIMEOUT = 40800
    PAYLOAD_TOO_LARGE = 41300
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    TOO_MANY_REQUESTS = 42900
    REQUEST_HEADER_FIELDS_TOO_LARGE = 43100
    MESSAGE_PROPERTIES_TOO_LARGE = 43101
    INTERNAL_ERROR = 50000
    INTERNAL_SERVER_ERROR = 50001
    HA_NOT_AVAILABLE = 50002
    NOT_IMPLEMENTED = 50100
    PROXY_TIMEOUT = 50400
    MASTER_PERSISTENCE_TIMEOUT = 50401
    SLAVE_PERSISTENCE_TIMEOUT = 50402
    UNSUPPORTED = 50500
    VERSION_UNSUPPORTED = 50501
    VERIFY_FIFO_MESSAGE_UNSUPPORTED = 50502
    FAILED_TO_CONSUME_MESSAGE = 60000


class ProxyError(Exception):
    """A request the proxy answers with ``code`` (not OK) and ``message``."""

    def __init__(
        self,
        code: Code,
        message: str | None = None,
        *,
        remote_code: int | None = None,
        remote_remark: str | None = None,
    ) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message or code.name
        # the broker's or NameServer's own answer behind it: the remoting port passes it on
        self.remote_code = remote_code
        self.remote_remark = remote_remark


# upstream ResponseBuilder: every other broker code is INTERNAL_SERVER_ERROR
_BROKER_CODES: dict[int, Code] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
}


def code_of_broker(response_code: int) -> Code:
    return _BROKER_CODES.get(response_code, Code.INTERNAL_SERVER_ERROR)


def broker_error(response_code: int, remark: str | None) -> ProxyError:
    """A broker's non-success answer as the proxy's error (its remark kept as the message)."""
    return ProxyError(
        code_of_broker(response_code),
        remark or str(response_code),
        remote_code=response_code,
        remote_remark=remark,
    )
