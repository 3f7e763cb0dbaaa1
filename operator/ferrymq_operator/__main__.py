"""``python -m ferrymq_operator``: run the operator (the image's entrypoint).

Runs kopf standalone with a liveness endpoint, on ``--namespace`` (repeatable) or
``FERRYMQ_OPERATOR_WATCH_NAMESPACES`` (comma-separated), or every namespace with
``--all-namespaces`` (or when none is named). Serves /metrics on ``FERRYMQ_OPERATOR_METRICS_PORT``.

With ``--leader-election`` (``FERRYMQ_OPERATOR_LEADER_ELECTION=true``) several replicas may run:
each waits for the Lease ``FERRYMQ_OPERATOR_LEADER_LEASE`` in ``POD_NAMESPACE`` (ferrymq_operator.leader)
and only its holder runs kopf; a replica that loses it stops reconciling and exits 1, so its pod
restarts and waits again.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import socket
import sys
import threading

import kopf

from ferrymq_operator import k8s, leader, metrics, settings

log = logging.getLogger("ferrymq_operator")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ferrymq_operator", description=__doc__)
    parser.add_argument(
        "-n", "--namespace", action="append", default=[], help="namespace to watch (repeatable)"
    )
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--liveness",
        default=os.environ.get("FERRYMQ_OPERATOR_LIVENESS", "http://0.0.0.0:8080/healthz"),
        help="kopf liveness endpoint URL ('' to disable)",
    )
    parser.add_argument(
        "--leader-election",
        action="store_true",
        default=os.environ.get("FERRYMQ_OPERATOR_LEADER_ELECTION", "").lower() == "true",
        help="run only while holding the leader Lease (several replicas)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def watched_namespaces(cli: list[str], env: str) -> list[str]:
    """CLI wins over the environment; empty strings dropped; duplicates removed, order kept."""
    raw = cli or env.split(",")
    return list(dict.fromkeys(ns.strip() for ns in raw if ns.strip()))


def _lease_lock(op: settings.OperatorSettings, namespaces: list[str]) -> leader.LeaseLock:
    namespace = os.environ.get("POD_NAMESPACE") or (namespaces[0] if namespaces else "default")
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    return leader.LeaseLock(
        k8s.api_client_from(op.kubeconfig), namespace, op.leader_lease, identity
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    namespaces = (
        []
        if args.all_namespaces
        else watched_namespaces(
            args.namespace, os.environ.get("FERRYMQ_OPERATOR_WATCH_NAMESPACES", "")
        )
    )
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        op = settings.load()
    except settings.SettingsError as error:
        sys.exit(str(error))
    metrics.serve(op.metrics_port)
    importlib.import_module("ferrymq_operator.handlers")  # registers the handlers with kopf
    lock = _lease_lock(op, namespaces) if args.leader_election else None
    renewing = threading.Event()
    if lock is not None and not leader.acquire(lock, renewing):
        return
    lost = threading.Event()
    try:
        asyncio.run(_serve(namespaces, args.liveness or None, lock, renewing, lost))
    except asyncio.CancelledError:
        pass  # as kopf.run: the operator's own tasks were cancelled on the way out
    finally:
        renewing.set()
    if lost.is_set():
        sys.exit("stopped: the leader Lease was lost")


async def _serve(
    namespaces: list[str],
    liveness: str | None,
    lock: leader.LeaseLock | None,
    renewing: threading.Event,
    lost: threading.Event,
) -> None:
    """kopf in this loop, stopped by SIGTERM/SIGINT (kopf's handlers) or by a lost Lease.

    The stop flag is an asyncio.Event set from the lease thread through the loop: kopf waits on a
    threading.Event in an executor thread that nothing wakes on SIGTERM, and asyncio.run then waits
    for that thread forever (the process never exited after SIGTERM)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    if lock is not None:

        def on_lost() -> None:
            metrics.LEADER.set(0)
            lost.set()
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(
            target=leader.hold, args=(lock, renewing, on_lost), name="lease", daemon=True
        ).start()
    metrics.LEADER.set(1)
    await kopf.operator(
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=liveness,
        stop_flag=stop,
    )


if __name__ == "__main__":
    main()
