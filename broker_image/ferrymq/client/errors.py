"""Client errors: one exception class per broker/NameServer response code, carrying behaviour.

Modelled on aiokafka's ``errors.py``: each class says whether the producer may retry the request on
another broker (``retriable``) and whether the topic route should be fetched again first
(``refresh_route``); :func:`for_code` maps a response code to its class. The retriable set follows
upstream ``DefaultMQProducer.retryResponseCodes`` (TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE,
SYSTEM_ERROR, NO_PERMISSION, NO_BUYER_ID, NOT_IN_CURRENT_UNIT) plus SYSTEM_BUSY, which upstream 4.x
treats as transient broker back-pressure too.

Transport failures (connect, timeout, closed connection) come from ``ferrymq.remoting.errors`` and
are wrapped in :class:`BrokerUnreachableError` by the client so one ``except MQClientError`` is enough.
"""

from __future__ import annotations

from ferrymq.remoting.codes import ResponseCode


class MQClientError(Exception):
    """Base of every client-side failure."""

    retriable = False
    refresh_route = False


class ClientStateError(MQClientError):
    """The client is not started, or already shut down."""


class MessageValidationError(MQClientError, ValueError):
    """The message was refused before sending (topic name, empty or oversized body)."""


class NoRouteError(MQClientError):
    """No NameServer knows the topic (upstream: "No route info of this topic")."""

    refresh_route = True


class BrokerUnreachableError(MQClientError):
    """The broker could not be reached or did not answer in time; another broker may be tried."""

    retriable = True

    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(f"broker {addr}: {reason}")
        self.addr = addr


class NameServerUnreachableError(MQClientError):
    """No NameServer of the list answered."""

    retriable = True

    def __init__(self, addrs: str, reason: str) -> None:
        super().__init__(f"NameServer {addrs}: {reason}")
        self.addr = addrs


class MQResponseError(MQClientError):
    """A peer answered with a non-success code; ``code`` and ``remark`` are the peer's."""

    code: int = -1

    def __init__(self, code: int, remark: str | None, addr: str | None = None) -> None:
        name = _code_name(code)
        where = f" from {addr}" if addr else ""
        super().__init__(f"{name} ({code}){where}: {remark or 'no remark'}")
        self.code = code
        self.remark = remark or ""
        self.addr = addr


class BrokerSystemError(MQResponseError):
    code = ResponseCode.SYSTEM_ERROR
    retriable = True


class SystemBusyError(MQResponseError):
    code = ResponseCode.SYSTEM_BUSY
    retriable = True


class RequestCodeNotSupportedError(MQResponseError):
    code = ResponseCode.REQUEST_CODE_NOT_SUPPORTED


class MessageIllegalError(MQResponseError):
    code = ResponseCode.MESSAGE_ILLEGAL


class ServiceNotAvailableError(MQResponseError):
    code = ResponseCode.SERVICE_NOT_AVAILABLE
    retriable = True
    refresh_route = True


class VersionNotSupportedError(MQResponseError):
    code = ResponseCode.VERSION_NOT_SUPPORTED


class NoPermissionError(MQResponseError):
    """Typically a broker whose write permission was wiped: go elsewhere and re-read the route."""

    code = ResponseCode.NO_PERMISSION
    retriable = True
    refresh_route = True


class TopicNotExistError(MQResponseError):
    code = ResponseCode.TOPIC_NOT_EXIST
    retriable = True
    refresh_route = True


class TopicExistAlreadyError(MQResponseError):
    code = ResponseCode.TOPIC_EXIST_ALREADY


class QueryNotFoundError(MQResponseError):
    code = ResponseCode.QUERY_NOT_FOUND


class SubscriptionParseFailedError(MQResponseError):
    code = ResponseCode.SUBSCRIPTION_PARSE_FAILED


class SubscriptionNotExistError(MQResponseError):
    code = ResponseCode.SUBSCRIPTION_NOT_EXIST


class SubscriptionNotLatestError(MQResponseError):
    code = ResponseCode.SUBSCRIPTION_NOT_LATEST


class SubscriptionGroupNotExistError(MQResponseError):
    code = ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


class NoBuyerIdError(MQResponseError):
    code = ResponseCode.NO_BUYER_ID
    retriable = True


class NotInCurrentUnitError(MQResponseError):
    code = ResponseCode.NOT_IN_CURRENT_UNIT
    retriable = True


class ConsumerNotOnlineError(MQResponseError):
    code = ResponseCode.CONSUMER_NOT_ONLINE


class ConsumeMsgTimeoutError(MQResponseError):
    code = ResponseCode.CONSUME_MSG_TIMEOUT


class NoMessageError(MQResponseError):
    code = ResponseCode.NO_MESSAGE


class FlowControlError(MQResponseError):
    code = ResponseCode.FLOW_CONTROL
    retriable = True


class UnknownResponseError(MQResponseError):
    """A code this client has no class for; ``code`` is the instance attribute."""


_BY_CODE: dict[int, type[MQResponseError]] = {
    int(cls.code): cls
    for cls in (
        BrokerSystemError,
        SystemBusyError,
        RequestCodeNotSupportedError,
        MessageIllegalError,
        ServiceNotAvailableError,
        VersionNotSupportedError,
        NoPermissionError,
        TopicNotExistError,
        TopicExistAlreadyError,
        QueryNotFoundError,
        SubscriptionParseFailedError,
        SubscriptionNotExistError,
        SubscriptionNotLatestError,
        SubscriptionGroupNotExistError,
        NoBuyerIdError,
        NotInCurrentUnitError,
        ConsumerNotOnlineError,
        ConsumeMsgTimeoutError,
        NoMessageError,
        FlowControlError,
    )
}


def for_code(code: int) -> type[MQResponseError]:
    """The exception class of a response code (UnknownResponseError for codes without one)."""
    return _BY_CODE.get(int(code), UnknownResponseError)


def response_error(code: int, remark: str | None, addr: str | None = None) -> MQResponseError:
    """An exception instance for a failed response."""
    return for_code(code)(code, remark, addr)


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return "UNKNOWN_CODE"
