"""``python -m ferrymq_operator``: run the operator (standalone kopf, liveness endpoint).

Equivalent to ``kopf run --standalone --liveness=http://0.0.0.0:8080/healthz
-m ferrymq_operator.handlers (--all-namespaces | --namespace NS ...)``. Watched namespaces come from
``--namespace`` or ``FERRYMQ_OPERATOR_WATCH_NAMESPACES`` (comma-separated); none means all.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os

import kopf


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ferrymq_operator", description=__doc__)
    parser.add_argument(
        "-n", "--namespace", action="append", default=[], help="namespace to watch (repeatable)"
    )
    parser.add_argument(
        "--liveness",
        default=os.environ.get("FERRYMQ_OPERATOR_LIVENESS", "http://0.0.0.0:8080/healthz"),
        help="kopf liveness endpoint URL ('' to disable)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser.parse_args(argv)


def watched_namespaces(cli: list[str], env: str) -> list[str]:
    """CLI wins over the environment; empty strings dropped; duplicates removed, order kept."""
    raw = cli or env.split(",")
    return list(dict.fromkeys(ns.strip() for ns in raw if ns.strip()))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    namespaces = watched_namespaces(
        args.namespace, os.environ.get("FERRYMQ_OPERATOR_WATCH_NAMESPACES", "")
    )
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    importlib.import_module("ferrymq_operator.handlers")  # registers the handlers with kopf
    kopf.run(
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness or None,
    )


if __name__ == "__main__":
    main()
