"""Self-contained HTML reports (jinja2) with embedded PNG plots (matplotlib, Agg backend).

The HTML has no external reference: styles are inline and each plot is a ``data:`` URI, so the
file can be mailed or archived as it is.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers or in executors
import matplotlib.pyplot as plt
import pandas as pd
from jinja2 import Environment, select_autoescape

HEATMAP_MAX_ROWS = 40

_BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f0f0f0}
.OK{color:#17803d}.WARN{color:#b7791f}.ERR,.ERROR,.STOP,.STALL,.REWIND{color:#c53030;font-weight:bold}
.INFO{color:#555}
img{max-width:100%;border:1px solid #eee}
</style></head><body>
<h1>{{ title }}</h1>
<p>Latest snapshot <code>{{ snapshot_id }}</code> taken {{ taken_at }}; {{ snapshots }} snapshot(s) in the history.</p>
{% block body %}{% endblock %}
</body></html>
"""

_BACKLOG = """{% extends "base" %}{% block body %}
<h2>Groups</h2>
<table><tr><th>group</th><th>status</th><th>total lag</th><th>time lag</th><th>topics</th></tr>
{% for g in summary.groups %}<tr><td>{{ g.group }}</td><td class="{{ g.status }}">{{ g.status }}</td>
<td>{{ g.lag }}</td><td>{{ fmt_ms(g.timeLagMs) }}</td><td>{{ g.topics|join(", ") }}</td></tr>{% endfor %}
</table>
<h2>Groups by topic</h2>
<table><tr><th>group</th><th>topic</th><th>status</th><th>lag</th><th>time lag</th><th>lagging queues</th></tr>
{% for t in summary.topics %}<tr><td>{{ t.group }}</td><td>{{ t.topic }}</td>
<td class="{{ t.status }}">{{ t.status }}</td><td>{{ t.lag }}</td><td>{{ fmt_ms(t.timeLagMs) }}</td>
<td>{{ t.laggingQueues }} / {{ t.queues }}</td></tr>{% endfor %}
</table>
{% if lag_plot %}<h2>Lag over time per group</h2><img alt="lag over time" src="{{ lag_plot }}">{% endif %}
{% if time_lag_plot %}<h2>Time lag over time per group</h2><img alt="time lag over time" src="{{ time_lag_plot }}">{% endif %}
{% if heat_plot %}<h2>Lag heat map by queue (queues not OK, or above {{ summary.okLag }} messages at some snapshot)</h2><img alt="lag heat map" src="{{ heat_plot }}">{% endif %}
<h2>Lagging queues and their owners</h2>
<p>Queues not OK, or with more than {{ summary.okLag }} messages of lag; {{ summary.healthyLaggingQueues }} more queue(s) show a small healthy lag.</p>
<table><tr><th>group</th><th>topic</th><th>queue</th><th>status</th><th>lag</th><th>consumer offset</th><th>broker offset</th><th>time lag</th><th>last consumed</th><th>owners</th></tr>
{% for q in summary.laggingQueues %}<tr><td>{{ q.group }}</td><td>{{ q.topic }}</td>
<td>{{ q.brokerName }}:{{ q.queueId }}</td><td class="{{ q.status }}">{{ q.status }}</td><td>{{ q.lag }}</td>
<td>{{ q.consumerOffset }}</td><td>{{ q.brokerOffset }}</td>
<td>{{ fmt_ms(q.timeLagMs) }} ({{ q.timeLagSource }})</td><td>{{ iso(q.lastConsumedAt) if q.lastConsumedAt else "-" }}</td>
<td>{{ q.owners|join(", ") or "none" }}</td></tr>
{% else %}<tr><td colspan="10">no lagging queue</td></tr>{% endfor %}
</table>
{% endblock %}"""

_AUDIT = """{% extends "base" %}{% block body %}
<h2>Findings ({{ summary.findings|length }})</h2>
<table><tr><th>snapshot</th><th>severity</th><th>kind</th><th>group</th><th>topic</th><th>detail</th><th>clients</th><th>queues</th></tr>
{% for f in summary.findings %}<tr><td>{{ f.snapshotId }}</td><td class="{{ f.severity }}">{{ f.severity }}</td>
<td>{{ f.kind }}</td><td>{{ f.group }}</td><td>{{ f.topic or "" }}</td><td>{{ f.detail }}</td>
<td>{{ f.clients|join(", ") }}</td><td>{{ f.queues|join(", ") }}</td></tr>
{% else %}<tr><td colspan="8">no finding: every queue is owned exactly once and fairly</td></tr>{% endfor %}
</table>
<h2>Findings across the history ({{ summary.timeline|length }})</h2>
<table><tr><th>severity</th><th>kind</th><th>group</th><th>topic</th><th>first seen</th><th>last seen</th><th>snapshots</th><th>now</th><th>last detail</th></tr>
{% for f in summary.timeline %}<tr><td class="{{ f.severity }}">{{ f.severity }}</td><td>{{ f.kind }}</td>
<td>{{ f.group }}</td><td>{{ f.topic or "" }}</td><td>{{ iso(f.firstSeen) }}</td><td>{{ iso(f.lastSeen) }}</td>
<td>{{ f.snapshots }}</td><td>{{ "yes" if f.current else "cleared" }}</td><td>{{ f.detail }}</td></tr>
{% else %}<tr><td colspan="9">no finding in any snapshot</td></tr>{% endfor %}
</table>
{% if share_plot %}<h2>Queues per client (latest snapshot)</h2><img alt="queues per client" src="{{ share_plot }}">{% endif %}
{% if churn_plot %}<h2>Allocation churn between snapshots</h2><img alt="churn" src="{{ churn_plot }}">{% endif %}
<h2>Groups audited</h2>
<table><tr><th>group</th><th>topic</th><th>strategy</th><th>clients</th><th>queues</th><th>findings</th><th>note</th></tr>
{% for g in summary.audited %}<tr><td>{{ g.group }}</td><td>{{ g.topic or "" }}</td><td>{{ g.strategy or "" }}</td>
<td>{{ g.clients }}</td><td>{{ g.queues }}</td><td>{{ g.findings }}</td><td>{{ g.note or "" }}</td></tr>{% endfor %}
</table>
{% if summary.notes %}<h2>Notes</h2><ul>{% for n in summary.notes %}<li>{{ n }}</li>{% endfor %}</ul>{% endif %}
{% endblock %}"""


def _env() -> Environment:
    from jinja2 import DictLoader

    env = Environment(
        loader=DictLoader({"base": _BASE, "backlog": _BACKLOG, "audit": _AUDIT}),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.globals["fmt_ms"] = fmt_ms
    env.globals["iso"] = _iso
    return env


def fmt_ms(ms: int | None) -> str:
    """Human duration of a time lag in milliseconds ("-" when unknown)."""
    if ms is None:
        return "-"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _time_axis(ax: Any, times: pd.DatetimeIndex) -> None:
    """Readable x scale for snapshot times: matplotlib spans years around a single point."""
    if len(times) and times.min() == times.max():
        pad = pd.Timedelta(minutes=5)
        ax.set_xlim(times.min() - pad, times.max() + pad)
    ax.set_xlabel("snapshot time (UTC)")


def time_lag_plot(history: pd.DataFrame) -> str | None:
    """Largest known time lag per group per snapshot (exact store times only), in minutes."""
    if history.empty or "timeLagMs" not in history or history["timeLagMs"].notna().sum() == 0:
        return None
    known = history[history["timeLagMs"].notna()]
    if not (known["lag"] > 0).any():
        return None  # only caught-up rows have a known (zero) time lag: nothing to show
    per = known.groupby(["takenAt", "group"])["timeLagMs"].max().unstack("group").sort_index()
    fig, ax = plt.subplots(figsize=(9, 4))
    times = pd.to_datetime(per.index, unit="ms", utc=True)
    for group in per.columns:
        ax.plot(times, per[group] / 60_000, marker="o", markersize=3, label=str(group))
    ax.set_ylabel("time lag (minutes)")
    _time_axis(ax, times)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    return _png(fig)


def lag_over_time_plot(history: pd.DataFrame) -> str | None:
    """Total lag per group per snapshot, one line per group."""
    if history.empty:
        return None
    per = history.groupby(["takenAt", "group"])["lag"].sum().unstack("group").fillna(0).sort_index()
    fig, ax = plt.subplots(figsize=(9, 4))
    times = pd.to_datetime(per.index, unit="ms", utc=True)
    for group in per.columns:
        ax.plot(times, per[group], marker="o", markersize=3, label=str(group))
    ax.set_ylabel("messages behind")
    _time_axis(ax, times)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    return _png(fig)


QueueKey = tuple[str, str, str, int]


def lag_heatmap_plot(
    history: pd.DataFrame,
    max_rows: int = HEATMAP_MAX_ROWS,
    ok_lag: int = 0,
    keep: frozenset[QueueKey] = frozenset(),
) -> str | None:
    """Lag per queue (rows, the most lagging at the latest snapshot) over snapshots (columns).

    Only queues whose lag exceeded ``ok_lag`` at some snapshot, or that are in ``keep`` (the
    queues not OK now), are drawn: a healthy busy group shows lag 1 on every queue, and those
    rows would crowd out the ones that matter.
    """
    if history.empty:
        return None
    key = ["group", "topic", "brokerName", "queueId"]
    peak = history.groupby(key)["lag"].transform("max")
    kept = [
        (g, t, b, int(q)) in keep
        for g, t, b, q in zip(
            history["group"],
            history["topic"],
            history["brokerName"],
            history["queueId"],
            strict=True,
        )
    ]
    history = history[(peak > ok_lag) | pd.Series(kept, index=history.index)]
    if history.empty:
        return None
    h = history.assign(
        queue=history["group"]
        + " | "
        + history["topic"]
        + " | "
        + history["brokerName"]
        + ":"
        + history["queueId"].astype(str)
    )
    grid = h.pivot_table(index="queue", columns="takenAt", values="lag", aggfunc="sum").fillna(0)
    grid = grid.sort_index(axis=1)
    grid = grid.loc[grid.iloc[:, -1].sort_values(ascending=False).index[:max_rows]]
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.28 * len(grid) + 1)))
    im = ax.imshow(grid.to_numpy(), aspect="auto", cmap="Reds", interpolation="nearest")
    ax.set_yticks(range(len(grid)), labels=list(grid.index), fontsize=7)
    step = max(1, len(grid.columns) // 10)
    cols = list(grid.columns)
    ax.set_xticks(
        range(0, len(cols), step),
        labels=[_iso(int(c))[11:19] for c in cols[::step]],
        fontsize=7,
        rotation=45,
    )
    ax.set_xlabel("snapshot time (UTC)")
    fig.colorbar(im, ax=ax, label="lag (messages)")
    return _png(fig)


def render_backlog(data: Mapping[str, Any], history: pd.DataFrame, queues: pd.DataFrame) -> str:
    """The backlog HTML report: tables from the summary, plots from the lag history."""
    return (
        _env()
        .get_template("backlog")
        .render(
            title="ferrymq backlog report",
            snapshot_id=data["snapshotId"],
            taken_at=_iso(data["takenAt"]),
            snapshots=data["snapshots"],
            summary=data,
            lag_plot=lag_over_time_plot(history),
            time_lag_plot=time_lag_plot(history),
            heat_plot=lag_heatmap_plot(
                history,
                ok_lag=int(data.get("okLag", 0)),
                keep=frozenset(
                    (q["group"], q["topic"], q["brokerName"], int(q["queueId"]))
                    for q in data.get("laggingQueues", ())
                ),
            ),
        )
    )


def queue_share_plot(shares: pd.DataFrame) -> str | None:
    """Bars of queues owned per client, one panel row per group/topic (latest snapshot)."""
    if shares.empty:
        return None
    labels = shares["group"] + " | " + shares["topic"] + " | " + shares["clientId"]
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.28 * len(shares) + 1)))
    ax.barh(range(len(shares)), shares["queues"], color="#4a78b5")
    ax.set_yticks(range(len(shares)), labels=list(labels), fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("queues owned")
    return _png(fig)


def churn_plot(churn: pd.DataFrame) -> str | None:
    """Queues that changed owner between consecutive snapshots, per group."""
    if churn.empty:
        return None
    per = (
        churn.groupby(["takenAt", "group"])["changed"].sum().unstack("group").fillna(0).sort_index()
    )
    fig, ax = plt.subplots(figsize=(9, 3.5))
    times = pd.to_datetime(per.index, unit="ms", utc=True)
    for group in per.columns:
        ax.plot(times, per[group], marker="o", markersize=3, label=str(group))
    ax.set_ylabel("queues changing owner")
    _time_axis(ax, times)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    return _png(fig)


def render_audit(data: Mapping[str, Any], shares: pd.DataFrame, churn: pd.DataFrame) -> str:
    """The rebalance audit HTML report."""
    return (
        _env()
        .get_template("audit")
        .render(
            title="ferrymq rebalance audit",
            snapshot_id=data["snapshotId"],
            taken_at=_iso(data["takenAt"]),
            snapshots=data["snapshots"],
            summary=data,
            share_plot=queue_share_plot(shares),
            churn_plot=churn_plot(churn),
        )
    )
