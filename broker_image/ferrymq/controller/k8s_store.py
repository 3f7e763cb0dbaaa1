# The official client is only partly annotated; this module is the typed boundary around it.
# mypy: disable-error-code="no-untyped-call"
"""The controller's state and leadership on Kubernetes (``controllerStoreType=kubernetes``).

No consensus of our own: the API server is the single source of truth.

- :class:`ConfigMapStateStore` keeps the groups (the same JSON as the file store) in one ConfigMap
  and writes it with compare-and-swap on ``resourceVersion``: a save based on a version someone else
  has since replaced is refused (:class:`StateConflict`), so a deposed controller can never
  overwrite what its successor decided.
- :class:`LeaseElector` holds a ``coordination.k8s.io/v1`` Lease (acquire, renew, expire) as
  client-go's leader election does: a Lease counts as expired when its record has not changed for
  ``leaseDurationSeconds`` of *our own* clock (no trust in other hosts' clocks), and a leader that
  could not renew within ``renew_deadline`` stops acting as leader before anyone else may take over.

The kubernetes client is synchronous: every call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

import orjson

from ferrymq.controller.state import STATE_FILE, GroupState, StateConflict
from ferrymq.tasks import Periodic

log = logging.getLogger(__name__)

STATE_KEY = STATE_FILE


def _api_exception() -> type[Exception]:
    from kubernetes.client.exceptions import ApiException

    exc: type[Exception] = ApiException
    return exc


def _status(exc: Exception) -> int:
    return int(getattr(exc, "status", 0) or 0)


class ConfigMapStateStore:
    """The controller's groups in ``ConfigMap/<name>`` (key ``controller.json``), CAS on save."""

    def __init__(self, api_client: Any, namespace: str, name: str) -> None:
        from kubernetes import client as k8s

        self.core = k8s.CoreV1Api(api_client)
        self.namespace = namespace
        self.name = name
        # the version our in-memory state is based on; None: the object did not exist
        self.resource_version: str | None = None
        self._lock = asyncio.Lock()

    def __str__(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def load(self, now_ms: int) -> dict[str, GroupState]:
        """The saved groups (empty when the ConfigMap is absent); ValueError when unreadable."""
        cm: Any
        try:
            cm = self.core.read_namespaced_config_map(self.name, self.namespace)
        except _api_exception() as exc:
            if _status(exc) != 404:
                raise
            self.resource_version = None
            return {}
        self.resource_version = cm.metadata.resource_version
        raw = (cm.data or {}).get(STATE_KEY, '{"groups": []}')
        try:
            data = orjson.loads(raw)
            groups = [GroupState.from_json(g, now_ms) for g in data.get("groups", [])]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{self}: unreadable controller state: {exc!r}") from None
        return {g.broker_name: g for g in groups}

    def _write(self, payload: str) -> None:
        from kubernetes import client as k8s

        body = k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                resource_version=self.resource_version,
                labels={"app.kubernetes.io/component": "controller-state"},
            ),
            data={STATE_KEY: payload},
        )
        written: Any
        try:
            if self.resource_version is None:
                written = self.core.create_namespaced_config_map(self.namespace, body)
            else:
                written = self.core.replace_namespaced_config_map(self.name, self.namespace, body)
        except _api_exception() as exc:
            # 409: replaced since our read (or created by someone else first)
            if _status(exc) == 409:
                raise StateConflict(
                    f"{self} changed since version {self.resource_version}: another controller "
                    "wrote it; not overwriting"
                ) from None
            raise
        self.resource_version = written.metadata.resource_version

    async def save(self, groups: dict[str, GroupState]) -> None:
        payload = orjson.dumps(
            {"groups": [g.to_json() for g in groups.values()]}, option=orjson.OPT_INDENT_2
        ).decode()
        async with self._lock:
            await asyncio.to_thread(self._write, payload)


# --- leadership --------------------------------------------------------------------------------


class LeaseAction(Enum):
    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # ours
    TAKE = "take"  # free or expired
    WAIT = "wait"  # someone else holds it


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str
    duration_s: int
    renew_time: datetime | None
    transitions: int


def lease_action(
    record: LeaseRecord | None, identity: str, observed_at: float, now: float
) -> LeaseAction:
    """What to do with the Lease. ``observed_at``: our monotonic time when the record was last
    seen to change; a holder's Lease expires ``duration_s`` after that on our own clock."""
    if record is None:
        return LeaseAction.CREATE
    if record.holder == identity:
        return LeaseAction.RENEW
    if not record.holder or now >= observed_at + record.duration_s:
        return LeaseAction.TAKE
    return LeaseAction.WAIT


class LeaseElector:
    """Acquire and renew ``Lease/<name>``; ``is_leader()`` is true only while our last successful
    renewal is younger than ``renew_deadline_s`` (< the Lease duration, so we stop acting before
    another controller may consider the Lease expired)."""

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration_s: int = 15,
        renew_deadline_s: float | None = None,
        retry_period_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from kubernetes import client as k8s

        if lease_duration_s < 1:
            raise ValueError(f"lease duration must be >= 1 s, got {lease_duration_s}")
        self.coordination = k8s.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s or lease_duration_s * 2 / 3
        self.retry_period_s = retry_period_s or lease_duration_s / 5
        if not self.renew_deadline_s < lease_duration_s:
            raise ValueError("renew deadline must be shorter than the lease duration")
        self.clock = clock
        # increases on every acquisition: a new term means "reload the state first"
        self.term = 0
        self._renewed_at: float | None = None
        self._observed: tuple[str, datetime | None] | None = None
        self._observed_at = 0.0
        # the retry cadence; the first try at once
        self._loop = Periodic(
            f"lease-{namespace}-{name}", self.step, lambda: self.retry_period_s, first_now=True
        )

    def is_leader(self) -> bool:
        return self._renewed_at is not None and (
            self.clock() - self._renewed_at < self.renew_deadline_s
        )

    def _record(self, lease: Any) -> LeaseRecord:
        spec = lease.spec
        return LeaseRecord(
            holder=spec.holder_identity or "",
            duration_s=int(spec.lease_duration_seconds or self.lease_duration_s),
            renew_time=spec.renew_time,
            transitions=int(spec.lease_transitions or 0),
        )

    def try_acquire_or_renew(self) -> bool:
        """One round (blocking; run in a thread): True when we hold the Lease afterwards."""
        from kubernetes import client as k8s

        now = self.clock()
        lease: Any
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
        except _api_exception() as exc:
            if _status(exc) != 404:
                raise
            lease = None
        record = self._record(lease) if lease is not None else None
        if record is not None:
            seen = (record.holder, record.renew_time)
            if seen != self._observed:
                self._observed, self._observed_at = seen, now
        action = lease_action(record, self.identity, self._observed_at, now)
        if action is LeaseAction.WAIT:
            self._renewed_at = None
            return False
        stamp = datetime.now(UTC)
        was_leader = self.is_leader()
        spec = k8s.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=self.lease_duration_s,
            acquire_time=(
                lease.spec.acquire_time
                if action is LeaseAction.RENEW and lease is not None and lease.spec.acquire_time
                else stamp
            ),
            renew_time=stamp,
            lease_transitions=(record.transitions if record else 0)
            + (1 if action is LeaseAction.TAKE else 0),
        )
        try:
            if action is LeaseAction.CREATE:
                body = k8s.V1Lease(
                    metadata=k8s.V1ObjectMeta(name=self.name, namespace=self.namespace), spec=spec
                )
                self.coordination.create_namespaced_lease(self.namespace, body)
            else:
                assert lease is not None
                # CAS on resourceVersion: of two controllers taking an expired Lease, one wins
                body = k8s.V1Lease(
                    metadata=k8s.V1ObjectMeta(
                        name=self.name,
                        namespace=self.namespace,
                        resource_version=lease.metadata.resource_version,
                    ),
                    spec=spec,
                )
                self.coordination.replace_namespaced_lease(self.name, self.namespace, body)
        except _api_exception() as exc:
            if _status(exc) == 409:
                return self.is_leader()  # someone else wrote first; our old renewal still counts
            raise
        self._renewed_at = now
        self._observed, self._observed_at = (self.identity, stamp), now
        if not was_leader:
            self.term += 1
            log.warning("controller %s now leads (Lease %s)", self.identity, self.name)
        return True

    async def step(self) -> bool:
        try:
            return await asyncio.to_thread(self.try_acquire_or_renew)
        except Exception as exc:  # API unreachable: keep trying; is_leader() lapses by itself
            log.warning("Lease %s/%s: %r", self.namespace, self.name, exc)
            return self.is_leader()

    def start(self) -> None:
        self._loop.start()

    async def stop(self, *, release: bool = True) -> None:
        await self._loop.stop()
        if release and self.is_leader():
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._release)
        self._renewed_at = None

    def _release(self) -> None:
        """Hand the Lease back (holder emptied) so a successor need not wait for expiry."""
        lease: Any = self.coordination.read_namespaced_lease(self.name, self.namespace)
        if (lease.spec.holder_identity or "") != self.identity:
            return
        lease.spec.holder_identity = ""
        self.coordination.replace_namespaced_lease(self.name, self.namespace, lease)


def pod_namespace() -> str:
    """The namespace this pod runs in (downward API env, else the service account's file)."""
    env = os.environ.get("POD_NAMESPACE", "").strip()
    if env:
        return env
    path = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as f:
        return f.read().strip()
    return "default"


def default_identity() -> str:
    return os.environ.get("POD_NAME", "").strip() or socket.gethostname()


def api_client() -> Any:
    """In-cluster service account when running in a pod, else $KUBECONFIG."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    try:
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
        return k8s.ApiClient(configuration)
    except k8s_config.ConfigException:
        return k8s_config.new_client_from_config(config_file=os.environ.get("KUBECONFIG") or None)
