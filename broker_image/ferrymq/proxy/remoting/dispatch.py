"""Pure decisions of the remoting port (upstream ``AbstractRemotingActivity``): which broker a
request goes to, the request as forwarded, the answer as the client gets it, and how a failure is
answered. No I/O."""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.proxy.errors import Code, ProxyError
from ferrymq.remoting import bodies, headers
from ferrymq.remoting.codes import RequestCode, ResponseCode
from ferrymq.remoting.command import RESPONSE_FLAG, RemotingCommand

BROKER_NAME_FIELD = "bname"
# SendMessageRequestHeaderV2 names its brokerName "n" (SEND_MESSAGE_V2, SEND_BATCH_MESSAGE)
BROKER_NAME_FIELD_FOR_SEND_V2 = "n"
NO_BROKER_NAME = "Request doesn't have field bname"
# upstream ProxyConfig regionId / traceOn, put into every answer (AbstractRemotingActivity)
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"

# upstream PROXY_EXCEPTION_RESPONSE_CODE_MAP; any other proxy error is a SYSTEM_ERROR
_PROXY_CODES: dict[Code, int] = {
    Code.FORBIDDEN: ResponseCode.NO_PERMISSION,
    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: ResponseCode.MESSAGE_ILLEGAL,
    Code.INTERNAL_SERVER_ERROR: ResponseCode.SYSTEM_ERROR,
}


def broker_name_of(request: RemotingCommand) -> str | None:
    """The broker group a request is for, as the client named it (5.x remoting clients set
    ``bname``, or ``n`` on SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE); None when it did not."""
    if request.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        return request.ext_fields.get(BROKER_NAME_FIELD_FOR_SEND_V2) or None
    return request.ext_fields.get(BROKER_NAME_FIELD) or None


def missing_broker_name(request: RemotingCommand) -> RemotingCommand:
    """Upstream's answer to a request that names no broker (the 4.x clients before 5.0 do not):
    the proxy cannot tell which broker group the queue belongs to."""
    return request.response(ResponseCode.VERSION_NOT_SUPPORTED, NO_BROKER_NAME)


def forwarded(request: RemotingCommand) -> RemotingCommand:
    """The client's request as the proxy sends it on: its header and body, a fresh opaque."""
    copy = RemotingCommand.request(request.code, request.ext_fields, request.body)
    copy.flag = request.flag & ~RESPONSE_FLAG
    copy.language = request.language
    copy.version = request.version
    copy.remark = request.remark
    return copy


@dataclass(frozen=True, slots=True)
class Stamp:
    """What the proxy writes into every answer, over a broker's own values."""

    region_id: str = "DefaultRegion"
    trace_on: bool = False


def stamped(response: RemotingCommand, stamp: Stamp) -> RemotingCommand:
    """Every answer of the port carries the proxy's region and trace switch (replacing a
    broker's, as upstream's writeResponse does)."""
    response.ext_fields[PROPERTY_MSG_REGION] = stamp.region_id
    response.ext_fields[PROPERTY_TRACE_SWITCH] = "true" if stamp.trace_on else "false"
    return response


def answer(request: RemotingCommand, response: RemotingCommand) -> RemotingCommand:
    """A broker's response as the client gets it: under the client's opaque, in its header
    encoding."""
    out = request.response(response.code, response.remark, response.ext_fields, response.body)
    out.language = response.language
    out.version = response.version
    return out


def error_answer(request: RemotingCommand, exc: ProxyError) -> RemotingCommand:
    """A failure as upstream's writeErrResponse answers it: a broker's or NameServer's own code
    and remark when the error came from one, else the mapped proxy code."""
    if exc.remote_code is not None:
        return request.response(exc.remote_code, exc.remote_remark)
    return request.response(_PROXY_CODES.get(exc.code, ResponseCode.SYSTEM_ERROR), exc.message)


def with_subscription(
    request: RemotingCommand, subscription: bodies.SubscriptionData
) -> RemotingCommand:
    """A PULL_MESSAGE without the subscription flag, with the consumer's subscription (from its
    heartbeat to the proxy) filled in, as upstream's PullMessageActivity does: the broker never
    sees the consumer's heartbeat."""
    out = forwarded(request)
    ext = dict(out.ext_fields)
    ext["sysFlag"] = str(int(ext.get("sysFlag") or 0) | headers.PULL_FLAG_SUBSCRIPTION)
    ext["subscription"] = subscription.sub_string
    ext["expressionType"] = subscription.expression_type
    out.ext_fields = ext
    return out


def needs_subscription(request: RemotingCommand) -> bool:
    return not int(request.ext_fields.get("sysFlag") or 0) & headers.PULL_FLAG_SUBSCRIPTION
