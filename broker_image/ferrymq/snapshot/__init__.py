"""Cluster snapshots for the audit jobs: schema, writer and collector (no Spark dependency).

A snapshot is one directory per collector run, holding ``meta.json`` and one JSON-lines file per
table (see :mod:`ferrymq.snapshot.schema`). Snapshots accumulate side by side into a history that
``ferrymq report backlog|rebalance`` reads.
"""
