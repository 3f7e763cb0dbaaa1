"""kopf handlers for Topic and ConsumerGroup (imported by ``ferrymq_operator.handlers``).

Create, update, resume and the resync daemon all end in one call per resource (serialised by a
per-resource lock): re-read it, reconcile, post events, write the status. Deletion has a handler, so
kopf keeps its finalizer on every Topic/ConsumerGroup until the object is removed from the brokers
(or retained by annotation).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import kopf

from ferrymq_operator import k8s, metrics, models, resync
from ferrymq_operator.reconcile import Context, Result
from ferrymq_operator.topics import reconcile
from ferrymq_operator.topics.admin import RemotingObjectAdmin

PLURALS = {"Topic": "topics", "ConsumerGroup": "consumergroups"}
Reconciler = Callable[[reconcile.TopicContext, Mapping[str, Any]], Awaitable[Result]]
RECONCILERS: dict[str, Reconciler] = {
    "Topic": reconcile.reconcile_topic,
    "ConsumerGroup": reconcile.reconcile_group,
}
FINALIZERS = {"Topic": reconcile.finalize_topic, "ConsumerGroup": reconcile.finalize_group}


def topic_context(memo: kopf.Memo) -> reconcile.TopicContext:
    """Built from the operator's start-up context (kube client, settings).

    Brokers are reached by cluster DNS unless the memo given to ``kopf.operator`` carries
    ``topic_addresses`` (an ``Addresses``; for an operator run outside the cluster network).
    """
    if "topic_ctx" not in memo:
        ctx: Context = memo.ctx
        memo.topic_ctx = reconcile.TopicContext(
            kube=ctx.kube,
            admin=RemotingObjectAdmin(ctx.settings.admin_timeout_seconds),
            addresses=memo.get("topic_addresses")
            or reconcile.DnsAddresses(ctx.settings.cluster_domain),
            retry_delay_seconds=ctx.settings.retry_delay_seconds,
        )
    topic_ctx: reconcile.TopicContext = memo.topic_ctx
    return topic_ctx


@kopf.on.startup()
async def topics_startup(memo: kopf.Memo, **_: Any) -> None:
    # On the root memo, so every resource's copy of it shares one table of locks.
    memo.topic_locks = {}


def _lock(memo: kopf.Memo, key: tuple[str, str, str]) -> asyncio.Lock:
    """One lock per resource: its handlers, its timer and a Broker's scale-out never interleave."""
    locks: dict[tuple[str, str, str], asyncio.Lock] = memo.topic_locks
    return locks.setdefault(key, asyncio.Lock())


async def run(memo: kopf.Memo, kind: str, namespace: str, name: str, raise_errors: bool) -> None:
    ctx = topic_context(memo)
    async with _lock(memo, (kind, namespace, name)):
        body = await ctx.kube.get(models.API_VERSION, kind, namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        try:
            result = await metrics.timed(kind, lambda: RECONCILERS[kind](ctx, body))
            for event_type, reason, message in result.events:
                kopf.event(cast(Any, body), type=event_type, reason=reason, message=message)
            await ctx.kube.patch_status(models.API_VERSION, kind, namespace, name, result.status)
        except k8s.ApiError as error:
            if raise_errors:
                raise kopf.TemporaryError(str(error), delay=ctx.retry_delay_seconds) from error
            logging.getLogger(__name__).warning("%s %s/%s: %s", kind, namespace, name, error)
            return
    if raise_errors and result.retry is not None:
        message = result.failure.message if result.failure else "waiting"
        raise kopf.TemporaryError(message, delay=result.retry)


async def finalize(memo: kopf.Memo, kind: str, namespace: str, name: str) -> None:
    ctx = topic_context(memo)
    async with _lock(memo, (kind, namespace, name)):
        body = await ctx.kube.get(models.API_VERSION, kind, namespace, name)
        if body is None:
            return
        try:
            events = await FINALIZERS[kind](ctx, body)
        except reconcile.Retry as error:
            kopf.event(cast(Any, body), type="Warning", reason="DeletePending", message=str(error))
            raise kopf.TemporaryError(str(error), delay=ctx.retry_delay_seconds) from error
        for event_type, reason, message in events:
            kopf.event(cast(Any, body), type=event_type, reason=reason, message=message)


@kopf.on.resume(models.GROUP, models.VERSION, "topics")
@kopf.on.create(models.GROUP, models.VERSION, "topics")
@kopf.on.update(models.GROUP, models.VERSION, "topics")
async def topic_changed(memo: kopf.Memo, namespace: str | None, name: str, **_: Any) -> None:
    await run(memo, "Topic", namespace or "", name, raise_errors=True)


def _resync_seconds(memo: kopf.Memo) -> float:
    ctx: Context = memo.ctx  # built by the start-up handler, which reads the settings
    return ctx.settings.resync_seconds


async def _resync(
    memo: kopf.Memo, stopped: kopf.DaemonStopped, kind: str, key: str, name: str
) -> None:
    seconds = _resync_seconds(memo)

    async def once() -> None:
        await run(memo, kind, key, name, raise_errors=False)

    await resync.every(stopped, seconds, f"{kind} {key}/{name}", once)


@kopf.daemon(models.GROUP, models.VERSION, "topics")
async def topic_resync(
    memo: kopf.Memo, stopped: kopf.DaemonStopped, namespace: str | None, name: str, **_: Any
) -> None:
    await _resync(memo, stopped, "Topic", namespace or "", name)


@kopf.on.delete(models.GROUP, models.VERSION, "topics")
async def topic_deleted(memo: kopf.Memo, namespace: str | None, name: str, **_: Any) -> None:
    await finalize(memo, "Topic", namespace or "", name)


@kopf.on.resume(models.GROUP, models.VERSION, "consumergroups")
@kopf.on.create(models.GROUP, models.VERSION, "consumergroups")
@kopf.on.update(models.GROUP, models.VERSION, "consumergroups")
async def group_changed(memo: kopf.Memo, namespace: str | None, name: str, **_: Any) -> None:
    await run(memo, "ConsumerGroup", namespace or "", name, raise_errors=True)


@kopf.daemon(models.GROUP, models.VERSION, "consumergroups")
async def group_resync(
    memo: kopf.Memo, stopped: kopf.DaemonStopped, namespace: str | None, name: str, **_: Any
) -> None:
    await _resync(memo, stopped, "ConsumerGroup", namespace or "", name)


@kopf.on.delete(models.GROUP, models.VERSION, "consumergroups")
async def group_deleted(memo: kopf.Memo, namespace: str | None, name: str, **_: Any) -> None:
    await finalize(memo, "ConsumerGroup", namespace or "", name)


@kopf.daemon(models.GROUP, models.VERSION, "brokers")
async def broker_unmanaged(
    memo: kopf.Memo, stopped: kopf.DaemonStopped, namespace: str | None, name: str, **_: Any
) -> None:
    """Count the Broker's topics and groups no resource manages (status.unmanaged), every
    resync."""
    seconds = _resync_seconds(memo)

    async def once() -> None:
        await _count_unmanaged(memo, namespace, name)

    await resync.every(stopped, seconds, f"unmanaged count of {namespace}/{name}", once)


async def _count_unmanaged(memo: kopf.Memo, namespace: str | None, name: str) -> None:
    ctx = topic_context(memo)
    body = await ctx.kube.get(models.API_VERSION, "Broker", namespace or "", name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return
    try:
        patch = await reconcile.unmanaged_status(ctx, body)
        if patch:
            await ctx.kube.patch_status(models.API_VERSION, "Broker", namespace or "", name, patch)
    except k8s.ApiError as error:
        logging.getLogger(__name__).warning("unmanaged count of %s/%s: %s", namespace, name, error)


# --- a Broker's groups changed: its Topics and ConsumerGroups follow at once, not at the resync ---


def _by_broker(
    namespace: str | None, name: str, spec: Mapping[str, Any]
) -> dict[tuple[str, str], str] | None:
    ref = (spec.get("brokerRef") or {}).get("name") if spec else None
    return {(namespace or "", str(ref)): name} if ref else None


@kopf.index(models.GROUP, models.VERSION, "topics")
def topics_by_broker(
    namespace: str | None, name: str, spec: Mapping[str, Any], **_: Any
) -> dict[tuple[str, str], str] | None:
    """(namespace, Broker name) -> the Topics referring to it."""
    return _by_broker(namespace, name, spec)


@kopf.index(models.GROUP, models.VERSION, "consumergroups")
def consumergroups_by_broker(
    namespace: str | None, name: str, spec: Mapping[str, Any], **_: Any
) -> dict[tuple[str, str], str] | None:
    """(namespace, Broker name) -> the ConsumerGroups referring to it."""
    return _by_broker(namespace, name, spec)


@kopf.on.event(models.GROUP, models.VERSION, "brokers")
async def broker_groups_event(
    event: Mapping[str, Any],
    body: Mapping[str, Any],
    memo: kopf.Memo,
    namespace: str | None,
    name: str,
    **kwargs: Any,
) -> None:
    """A changed ``spec.groups`` reconciles the Broker's Topics and ConsumerGroups now (the
    Broker's memo remembers the last count seen; the first sight is covered by their resume)."""
    if "ctx" not in memo or event.get("type") == "DELETED":
        return
    groups = int((body.get("spec") or {}).get("groups") or 1)
    seen = memo.get("topic_groups_seen")
    memo.topic_groups_seen = groups
    if seen is None or seen == groups:
        return
    key = (namespace or "", name)
    indexes: tuple[tuple[str, kopf.Index[tuple[str, str], str]], ...] = (
        ("Topic", kwargs["topics_by_broker"]),
        ("ConsumerGroup", kwargs["consumergroups_by_broker"]),
    )
    for kind, index in indexes:
        for resource in sorted(index.get(key, [])):
            await run(memo, kind, key[0], resource, raise_errors=False)
