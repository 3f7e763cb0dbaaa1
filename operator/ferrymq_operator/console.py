"""Reconcile a Console: find its Broker's NameServers, apply the dashboard's objects, report.
Framework-free like reconcile.py (handlers.py registers it with kopf)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ferrymq_operator import models, reconcile
from ferrymq_operator.builders import console as console_builder
from ferrymq_operator.console_models import ConsoleStatus, parse_console_spec
from ferrymq_operator.reconcile import Context, Result
from ferrymq_operator.status import Failure, observe_statefulset


async def _namesrv_addr(ctx: Context, body: Mapping[str, Any], broker: str) -> str | Failure:
    owner = reconcile.owner_of(body)
    broker_spec = await reconcile.referenced_spec(
        ctx, owner.namespace, "Broker", broker, models.parse_broker_spec
    )
    if isinstance(broker_spec, Failure):
        return broker_spec
    return await reconcile.namesrv_addr_of(ctx, owner, broker_spec)


async def reconcile_console(ctx: Context, body: Mapping[str, Any]) -> Result:
    owner, builder, result = reconcile.begin(body, ConsoleStatus)
    try:
        spec = parse_console_spec(body.get("spec") or {})
        owner.check_name()
    except ValueError as error:
        return reconcile.refused(builder, Failure("InvalidSpec", str(error)), result)
    addr = await _namesrv_addr(ctx, body, spec.broker_ref.name)
    if isinstance(addr, Failure):
        result.retry = ctx.settings.retry_delay_seconds
        return reconcile.refused(builder, addr, result)
    failure = await reconcile.apply_all(
        ctx.kube, console_builder.desired(owner, spec, addr), result
    )
    if failure is None and not spec.network_policy.enabled:
        name = console_builder.console_name(owner.name)
        await ctx.kube.delete("networking.k8s.io/v1", "NetworkPolicy", owner.namespace, name)
    name = console_builder.console_name(owner.name)
    deployment = await ctx.kube.get("apps/v1", "Deployment", owner.namespace, name)
    selector = ",".join(f"{k}={v}" for k, v in sorted(console_builder.selector(owner).items()))
    pods = await ctx.kube.list("v1", "Pod", owner.namespace, selector)
    builder.observe([observe_statefulset(name, spec.replicas, deployment, pods)], failure)
    builder.status.name_server_addr = addr
    builder.status.url = console_builder.url(owner, spec, ctx.settings.cluster_domain)
    return reconcile.finish(builder, failure, result)
