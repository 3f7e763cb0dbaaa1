"""Request code -> the resources it touches and the permission each needs (upstream
``PlainAccessResource.parse``), as a pure function of the request.

Groups are checked as their retry topic (``%RETRY%<group>``), as upstream does. Codes not listed
need no resource permission (only a valid signature, and admin for admin codes). ferrymq also
checks SEND_BATCH_MESSAGE like SEND_MESSAGE_V2 (upstream 4.9 leaves batches unchecked) and
reads the V2 short field names. Namespaced groups (``ns%group``) are not split: ferrymq has no
namespaces.
"""

from __future__ import annotations

from ferrymq.acl.permission import PUB, SUB
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.remoting.fastjson import loads
from ferrymq.topic_validator import RETRY_GROUP_TOPIC_PREFIX, retry_topic

Needed = list[tuple[str, int]]


def _is_retry(topic: str | None) -> bool:
    return topic is not None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def _send(needed: Needed, topic: str | None, group: str | None) -> None:
    # a send to a retry topic is a consumer's send-back: it needs SUB on the group
    if _is_retry(topic):
        if group is not None:
            needed.append((retry_topic(group), SUB))
    elif topic is not None:
        needed.append((topic, PUB))


def _group(needed: Needed, group: str | None) -> None:
    if group is not None:
        needed.append((retry_topic(group), SUB))


def _heartbeat(needed: Needed, body: bytes) -> None:
    if not body:
        return
    try:
        data = loads(body)
    except (ValueError, UnicodeDecodeError):
        return  # the processor answers a malformed heartbeat itself
    if not isinstance(data, dict):
        return
    for consumer in data.get("consumerDataSet") or ():
        if not isinstance(consumer, dict):
            continue
        group = consumer.get("groupName")
        _group(needed, str(group) if group is not None else None)
        for sub in consumer.get("subscriptionDataSet") or ():
            if isinstance(sub, dict) and sub.get("topic") is not None:
                needed.append((str(sub["topic"]), SUB))


def needed_permissions(request: RemotingCommand) -> Needed:
    """[(resource, permission)] that ``request`` needs, in upstream's order."""
    ext = request.ext_fields
    code = request.code
    needed: Needed = []
    if code == RequestCode.SEND_MESSAGE:
        _send(needed, ext.get("topic"), ext.get("producerGroup", ext.get("group")))
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        _send(needed, ext.get("b", ext.get("topic")), ext.get("a", ext.get("producerGroup")))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        _group(needed, ext.get("group"))
        origin = ext.get("originTopic")
        if origin is not None:
            needed.append((origin, PUB))
    # LITE_PULL_MESSAGE is the same pull: checked the same (upstream's ACL 2.0 builds no
    # context for 361, so it checks nothing; ferrymq does not open that gap)
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        topic = ext.get("topic")
        if topic is not None:
            needed.append((topic, SUB))
        _group(needed, ext.get("consumerGroup"))
    elif code == RequestCode.QUERY_MESSAGE:
        topic = ext.get("topic")
        if topic is not None:
            needed.append((topic, SUB))
    elif code == RequestCode.HEART_BEAT:
        _heartbeat(needed, request.body_bytes())
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        _group(needed, ext.get("consumerGroup"))
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        _group(needed, ext.get("consumerGroup"))
        topic = ext.get("topic")
        if topic is not None:
            needed.append((topic, SUB))
    return needed
