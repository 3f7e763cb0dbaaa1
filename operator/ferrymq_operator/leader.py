"""Leader election over a coordination.k8s.io/v1 Lease (client-go's leaderelection, simplified):
several operator replicas run, one reconciles.

A replica waits until it holds the Lease, then runs kopf; a thread renews the Lease every
``retry_period``. When a renewal has not succeeded for ``renew_deadline`` (shorter than the Lease
duration) the replica stops reconciling at once, before any other replica may take the Lease
(which needs ``lease_duration`` without renewal): so two replicas never reconcile together, and a
killed leader is replaced within ``lease_duration + retry_period``.

:func:`decide` is the pure rule; :class:`LeaseLock` does the API calls.
"""

from __future__ import annotations

import datetime
import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

LEASE_DURATION_S = 15
RENEW_DEADLINE_S = 10
RETRY_PERIOD_S = 2


class Decision(enum.Enum):
    ACQUIRE = "acquire"  # free or expired: take it (a new term)
    RENEW = "renew"  # ours: extend it
    WAIT = "wait"  # another replica holds a live Lease


@dataclass(frozen=True)
class LeaseView:
    holder: str | None
    renewed_at: float | None  # epoch seconds of renewTime (or acquireTime)
    duration_s: int


def decide(lease: LeaseView | None, me: str, now: float) -> Decision:
    """What a replica named ``me`` does with the Lease it just read."""
    if lease is None or not lease.holder:
        return Decision.ACQUIRE
    if lease.holder == me:
        return Decision.RENEW
    if lease.renewed_at is None or now - lease.renewed_at > lease.duration_s:
        return Decision.ACQUIRE
    return Decision.WAIT


def _micro_time(epoch: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC)


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    return datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


class LeaseLock:
    """Reads and writes one Lease; every write is conditional on the resourceVersion read."""

    def __init__(self, api: k8s_client.ApiClient, namespace: str, name: str, identity: str) -> None:
        self.coordination = k8s_client.CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity

    def try_hold(self, now: float) -> bool:
        """One attempt to acquire or renew; True when this replica holds the Lease after it."""
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            return self._create(now)
        spec = lease.spec or k8s_client.V1LeaseSpec()
        lease.spec = spec
        view = LeaseView(
            spec.holder_identity,
            _epoch(spec.renew_time or spec.acquire_time),
            int(spec.lease_duration_seconds or LEASE_DURATION_S),
        )
        decision = decide(view, self.identity, now)
        if decision is Decision.WAIT:
            return False
        if decision is Decision.ACQUIRE:
            spec.holder_identity = self.identity
            spec.acquire_time = _micro_time(now)
            spec.lease_transitions = int(spec.lease_transitions or 0) + 1
        spec.renew_time = _micro_time(now)
        spec.lease_duration_seconds = LEASE_DURATION_S
        try:
            # replace carries the resourceVersion read: a concurrent writer makes it fail (409)
            self.coordination.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True

    def _create(self, now: float) -> bool:
        body = k8s_client.V1Lease(
            metadata=k8s_client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=k8s_client.V1LeaseSpec(
                holder_identity=self.identity,
                acquire_time=_micro_time(now),
                renew_time=_micro_time(now),
                lease_duration_seconds=LEASE_DURATION_S,
                lease_transitions=0,
            ),
        )
        try:
            self.coordination.create_namespaced_lease(self.namespace, body)
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True


def hold(
    lock: LeaseLock,
    stop: threading.Event,
    on_lost: Callable[[], None],
    clock: Callable[[], float] = time.time,
) -> None:
    """Renew until ``stop``; call ``on_lost`` once renewals failed for RENEW_DEADLINE_S."""
    last_ok = clock()
    while not stop.wait(RETRY_PERIOD_S):
        try:
            held = lock.try_hold(clock())
        except Exception as error:  # the API may be unreachable: keep trying until the deadline
            log.warning("renewing the leader Lease failed: %s", error)
            held = False
        if held:
            last_ok = clock()
        elif clock() - last_ok > RENEW_DEADLINE_S or not _still_ours(lock):
            log.error("lost the leader Lease %s/%s; stopping", lock.namespace, lock.name)
            on_lost()
            return


def _still_ours(lock: LeaseLock) -> bool:
    """A failed renewal is only fatal at the deadline unless someone else already holds it."""
    try:
        lease = lock.coordination.read_namespaced_lease(lock.name, lock.namespace)
    except Exception:
        return True
    return lease.spec is not None and lease.spec.holder_identity == lock.identity


def acquire(lock: LeaseLock, stop: threading.Event, clock: Callable[[], float] = time.time) -> bool:
    """Block until this replica holds the Lease (True) or ``stop`` is set (False)."""
    waiting_logged = False
    while not stop.is_set():
        try:
            if lock.try_hold(clock()):
                log.info(
                    "holding the leader Lease %s/%s as %s", lock.namespace, lock.name, lock.identity
                )
                return True
        except Exception as error:
            log.warning("reading the leader Lease failed: %s", error)
        if not waiting_logged:
            log.info("waiting for the leader Lease %s/%s", lock.namespace, lock.name)
            waiting_logged = True
        stop.wait(RETRY_PERIOD_S)
    return False
