"""kopf handlers: decorators and adapters only. Run with ``kopf run -m ferrymq_operator.handlers``
or ``python -m ferrymq_operator``.

Every trigger (create, update, resume, the periodic resync (ferrymq_operator.resync), a child
StatefulSet changing or any child being deleted) ends in the same call: re-read the custom
resource, reconcile it, post the events, write the status. Per-resource locks serialise those calls
so two triggers never interleave. The settings are read by the start-up handler, never at import.

Work that is merely pending (a roll waiting for a pod to become Ready, topics to copy once a master
is up) is not an error: instead of raising kopf.TemporaryError (which kopf logs at ERROR on every
retry), the reconcile is scheduled again after the retry delay (:func:`follow_up`). Failures that
need a retry (a missing NameServer, an API error) still raise it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import kopf

from ferrymq_operator import broker_admin, host_ports, k8s, metrics, models, resync, status
from ferrymq_operator import settings as operator_settings
from ferrymq_operator.builders import names
from ferrymq_operator.console import reconcile_console
from ferrymq_operator.reconcile import (
    Context,
    Result,
    now,
    reconcile_broker,
    reconcile_nameserver,
)
from ferrymq_operator.reconcile import port_user as _port_user
from ferrymq_operator.topics import handlers as topic_handlers

# Topic and ConsumerGroup handlers register themselves with kopf on import.
__all__ = ["topic_handlers"]

Reconciler = Callable[[Context, Mapping[str, Any]], Awaitable[Result]]
RECONCILERS: dict[str, tuple[str, Reconciler]] = {
    "NameServer": ("nameservers", reconcile_nameserver),
    "Broker": ("brokers", reconcile_broker),
    "Console": ("consoles", reconcile_console),
}
CHILD_LABELS = {names.LABEL_MANAGED_BY: names.MANAGED_BY}

# kopf's own bookkeeping annotations (progress, last-handled-configuration). kopf leaves annotations
# under its storage prefix out of the diff it reacts to, so this must not be ferrymq.io: the
# user-facing ferrymq.io/pause-reconciliation and ferrymq.io/manual-rolling-restart would be
# ignored until the next resync.
KOPF_STORAGE_PREFIX = f"kopf.{models.GROUP}"

log = logging.getLogger(__name__)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Configure kopf, connect to the API, discover API versions; all of it kept in the memo."""
    settings.persistence.finalizer = f"{models.GROUP}/operator"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=KOPF_STORAGE_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_STORAGE_PREFIX, key="last-handled-configuration"
    )
    # kopf posts its own log lines as Events from this level; ours are posted explicitly.
    settings.posting.level = logging.WARNING
    # The environment is read here, not at import: a bad value stops the operator, named.
    try:
        op = operator_settings.load()
    except operator_settings.SettingsError as error:
        raise kopf.PermanentError(str(error)) from error
    kube = await k8s.Kube.connect(op.kubeconfig, op.field_manager)
    versions = await kube.discover()
    logging.getLogger(__name__).info(
        "ferrymq operator: PodDisruptionBudget %s, CronJob %s", versions.pdb, versions.cronjob
    )
    memo.ctx = Context(kube, op, versions, broker_admin.default_admin(op.admin_timeout_seconds))
    memo.locks = {}
    memo.waiting = set()
    memo.follow_ups = {}


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account, else $KUBECONFIG read now (not at library import)."""
    info: kopf.ConnectionInfo | None = kopf.login_with_service_account(
        **kwargs
    ) or kopf.login_with_kubeconfig(**kwargs)
    return info


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    for task in list((memo.get("follow_ups") or {}).values()):
        task.cancel()
    ctx: Context | None = memo.get("ctx")
    if ctx is not None:
        ctx.kube.close()


def follow_up(memo: kopf.Memo, kind: str, namespace: str, name: str, delay: float) -> None:
    """Reconcile this resource again after ``delay`` seconds (at most one scheduled per resource).

    Pending work (a roll waiting for a pod) is followed up this way rather than by raising
    kopf.TemporaryError: waiting is normal, and kopf logs every TemporaryError at ERROR.
    """
    key = (kind, namespace, name)
    tasks: dict[tuple[str, str, str], asyncio.Task[None]] = memo.follow_ups
    current = tasks.get(key)
    if current is not None and not current.done():
        return

    async def later() -> None:
        await asyncio.sleep(delay)
        tasks.pop(key, None)  # the pass below may schedule the next follow-up
        try:
            await reconcile_by_name(memo, kind, namespace, name, raise_errors=False)
        except Exception:  # a follow-up must never die silently; the resync retries anyway
            log.exception("follow-up reconcile of %s %s/%s failed", kind, namespace, name)

    tasks[key] = asyncio.create_task(later())


async def reconcile_by_name(
    memo: kopf.Memo, kind: str, namespace: str, name: str, raise_errors: bool
) -> None:
    """Reconcile the current version of one custom resource, then write its status.

    Triggers are coalesced: while one reconcile of a resource runs, at most one more waits, and
    further triggers return at once (the waiting one re-reads the resource, so it sees their
    changes too). Without this, a burst of StatefulSet events queues many slow passes, and a
    deletion waits for all of them.
    """
    ctx: Context = memo.ctx
    key = (kind, namespace, name)
    locks: dict[tuple[str, str, str], asyncio.Lock] = memo.locks
    waiting: set[tuple[str, str, str]] = memo.waiting
    if key in waiting:
        return
    lock = locks.setdefault(key, asyncio.Lock())
    waiting.add(key)
    try:
        await lock.acquire()
    finally:
        waiting.discard(key)
    try:
        try:
            body = await ctx.kube.get(models.API_VERSION, kind, namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return  # being deleted: the garbage collector removes the children
            result = await metrics.timed(kind, lambda: RECONCILERS[kind][1](ctx, body))
            for event_type, reason, message in result.events:
                kopf.event(cast(Any, body), type=event_type, reason=reason, message=message)
            await ctx.kube.patch_status(models.API_VERSION, kind, namespace, name, result.status)
        except k8s.ApiError as error:
            await _report_api_error(ctx, kind, namespace, name, error)
            if raise_errors:
                raise kopf.TemporaryError(
                    str(error), delay=ctx.settings.retry_delay_seconds
                ) from error
            logging.getLogger(__name__).warning(
                "reconcile of %s %s/%s: %s", kind, namespace, name, error
            )
            return
    finally:
        lock.release()
    if result.retry is not None and result.failure is None:
        log.debug("%s %s/%s: pending work, again in %ss", kind, namespace, name, result.retry)
        follow_up(memo, kind, namespace, name, result.retry)
        return
    if not raise_errors:
        return
    if result.retry is not None and result.failure is not None:
        raise kopf.TemporaryError(result.failure.message, delay=result.retry)
    if result.failure is not None:
        # Retrying the same spec cannot help; a spec change triggers the next attempt.
        raise kopf.PermanentError(result.failure.message)


async def _report_api_error(
    ctx: Context, kind: str, namespace: str, name: str, error: k8s.ApiError
) -> None:
    """Put an API failure on the resource's status (best effort: the API may be what fails)."""
    try:
        body = await ctx.kube.get(models.API_VERSION, kind, namespace, name)
        if body is None:
            return
        previous = models.ClusterStatus.model_validate(body.get("status") or {})
        generation = int(body["metadata"].get("generation", 1))
        builder = status.StatusBuilder(models.ClusterStatus, previous, generation, now())
        builder.fail(status.Failure("ApiError", f"{error}; retrying"))
        await ctx.kube.patch_status(models.API_VERSION, kind, namespace, name, builder.patch())
    except k8s.ApiError as again:
        logging.getLogger(__name__).warning(
            "cannot report %s on %s/%s: %s", error, namespace, name, again
        )


# --- the custom resources ---


@kopf.index(models.GROUP, models.VERSION, "nameservers")
def hostnetwork_nameservers(
    body: kopf.Body, spec: Mapping[str, Any], **_: Any
) -> dict[str, host_ports.PortUser] | None:
    """NameServers on the host network and the node ports they open (PortConflict checks)."""
    try:
        parsed = models.parse_nameserver_spec(dict(spec or {}))
    except models.InvalidSpec:
        return None  # refused on its own; it opens no ports
    ranges = host_ports.nameserver_ranges(parsed)
    return {"ports": _port_user(body, ranges)} if ranges else None


@kopf.index(models.GROUP, models.VERSION, "brokers")
def hostnetwork_brokers(
    body: kopf.Body, spec: Mapping[str, Any], **_: Any
) -> dict[str, host_ports.PortUser] | None:
    """Brokers on the host network and the node ports they open (PortConflict checks)."""
    try:
        parsed = models.parse_broker_spec(dict(spec or {}))
    except models.InvalidSpec:
        return None
    ranges = host_ports.broker_ranges(parsed)
    return {"ports": _port_user(body, ranges)} if ranges else None


def _with_indexes(memo: Any, kwargs: Mapping[str, Any]) -> None:
    """Hand kopf's port indexes to the reconciler (the index objects live as long as kopf)."""
    ctx: Context | None = memo.get("ctx")
    if ctx is None or ctx.port_users is not None:
        return
    indexes: list[kopf.Index[str, host_ports.PortUser]] = [
        kwargs["hostnetwork_nameservers"],
        kwargs["hostnetwork_brokers"],
    ]

    def port_users() -> list[host_ports.PortUser]:
        return [user for index in indexes for store in index.values() for user in store]

    ctx.port_users = port_users


@kopf.index(models.GROUP, models.VERSION, "brokers")
def brokers_by_nameserver(
    namespace: str | None, name: str, spec: Mapping[str, Any], **_: Any
) -> dict[tuple[str, str], str] | None:
    """(namespace, NameServer name) -> the Brokers referring to it (kept by kopf from watches)."""
    ref = (spec.get("nameServerRef") or {}).get("name") if spec else None
    return {(namespace or "", str(ref)): name} if ref else None


@kopf.on.resume(models.GROUP, models.VERSION, "nameservers")
@kopf.on.create(models.GROUP, models.VERSION, "nameservers")
@kopf.on.update(models.GROUP, models.VERSION, "nameservers")
async def nameserver_changed(memo: Any, namespace: str | None, name: str, **kwargs: Any) -> None:
    # kopf passes every index to every handler by the index function's name.
    brokers_by_nameserver: kopf.Index[tuple[str, str], str] = kwargs["brokers_by_nameserver"]
    _with_indexes(memo, kwargs)
    await reconcile_by_name(memo, "NameServer", namespace or "", name, raise_errors=True)
    # Brokers list every NameServer pod in namesrvAddr: a new or resized NameServer changes
    # their broker.conf, so bring them along now rather than at their next resync.
    for broker in sorted(brokers_by_nameserver.get((namespace or "", name), [])):
        await reconcile_by_name(memo, "Broker", namespace or "", broker, raise_errors=False)


@kopf.on.resume(models.GROUP, models.VERSION, "brokers")
@kopf.on.create(models.GROUP, models.VERSION, "brokers")
@kopf.on.update(models.GROUP, models.VERSION, "brokers")
async def broker_changed(memo: Any, namespace: str | None, name: str, **kwargs: Any) -> None:
    _with_indexes(memo, kwargs)
    await reconcile_by_name(memo, "Broker", namespace or "", name, raise_errors=True)


@kopf.on.resume(models.GROUP, models.VERSION, "consoles")
@kopf.on.create(models.GROUP, models.VERSION, "consoles")
@kopf.on.update(models.GROUP, models.VERSION, "consoles")
async def console_changed(memo: Any, namespace: str | None, name: str, **_: Any) -> None:
    await reconcile_by_name(memo, "Console", namespace or "", name, raise_errors=True)


async def _resync(
    memo: Any, stopped: kopf.DaemonStopped, kind: str, namespace: str, name: str, kwargs: Any
) -> None:
    ctx: Context = memo.ctx

    async def once() -> None:
        _with_indexes(memo, kwargs)
        await reconcile_by_name(memo, kind, namespace, name, raise_errors=False)

    what = f"{kind} {namespace}/{name}"
    await resync.every(stopped, ctx.settings.resync_seconds, what, once)


@kopf.daemon(models.GROUP, models.VERSION, "nameservers")
async def nameserver_resync(
    memo: Any, stopped: kopf.DaemonStopped, namespace: str | None, name: str, **kwargs: Any
) -> None:
    await _resync(memo, stopped, "NameServer", namespace or "", name, kwargs)


@kopf.daemon(models.GROUP, models.VERSION, "consoles")
async def console_resync(
    memo: Any, stopped: kopf.DaemonStopped, namespace: str | None, name: str, **kwargs: Any
) -> None:
    await _resync(memo, stopped, "Console", namespace or "", name, kwargs)


@kopf.daemon(models.GROUP, models.VERSION, "brokers")
async def broker_resync(
    memo: Any, stopped: kopf.DaemonStopped, namespace: str | None, name: str, **kwargs: Any
) -> None:
    await _resync(memo, stopped, "Broker", namespace or "", name, kwargs)


# --- children: recreate what was deleted, follow StatefulSet progress ---


def controller_owner(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the ferrymq custom resource that controls a child, if any."""
    for ref in body.get("metadata", {}).get("ownerReferences") or []:
        if (
            ref.get("controller")
            and str(ref.get("apiVersion", "")).startswith(f"{models.GROUP}/")
            and ref.get("kind") in RECONCILERS
        ):
            return str(ref["kind"]), str(ref["name"])
    return None


async def _child_event(
    event: Mapping[str, Any], body: Mapping[str, Any], memo: kopf.Memo, follow_modified: bool
) -> None:
    owner = controller_owner(body)
    if owner is None or "ctx" not in memo:
        return
    kind = event.get("type")
    if kind == "DELETED" or (follow_modified and kind == "MODIFIED"):
        namespace = body["metadata"]["namespace"]
        await reconcile_by_name(memo, owner[0], namespace, owner[1], raise_errors=False)


@kopf.on.event("apps", "v1", "statefulsets", labels=CHILD_LABELS)
async def statefulset_event(
    event: Mapping[str, Any], body: Mapping[str, Any], memo: kopf.Memo, **_: Any
) -> None:
    await _child_event(event, body, memo, follow_modified=True)


@kopf.on.event("apps", "v1", "deployments", labels=CHILD_LABELS)
@kopf.on.event("", "v1", "services", labels=CHILD_LABELS)
@kopf.on.event("", "v1", "configmaps", labels=CHILD_LABELS)
@kopf.on.event("policy", "poddisruptionbudgets", labels=CHILD_LABELS)
async def child_event(
    event: Mapping[str, Any], body: Mapping[str, Any], memo: kopf.Memo, **_: Any
) -> None:
    await _child_event(event, body, memo, follow_modified=False)
