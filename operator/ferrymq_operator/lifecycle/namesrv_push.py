"""NameServer pushes: a resized NameServer changes every broker's namesrvAddr; the running
brokers get it by UPDATE_BROKER_CONFIG (no restart)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ferrymq_operator import timeouts
from ferrymq_operator.builders import names
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.lifecycle.pods import PortOf, pod_address
from ferrymq_operator.security import session


async def push_namesrv_addr(
    owner: Owner,
    groups: int,
    replicas_per_group: int,
    ready_pods: set[str],
    namesrv_addr: str,
    update: Callable[[str, dict[str, str]], Awaitable[None]],
    domain: str,
    port_of: PortOf | None = None,
) -> list[str]:
    """UPDATE_BROKER_CONFIG namesrvAddr on every ready broker pod (no restart: the broker registers
    with the new list at its next round). Returns the pods that could not be updated."""

    async def one(group: int, broker_id: int) -> str | None:
        pod = names.broker_pod(owner.name, group, broker_id)
        addr = pod_address(owner, group, broker_id, domain, port_of)
        try:
            await update(addr, {"namesrvAddr": namesrv_addr})
        except Exception as error:  # reported and retried at the next pass
            return f"{pod}: {error}"
        return None

    targets = [
        (g, i)
        for g in range(groups)
        for i in range(replicas_per_group)
        if names.broker_pod(owner.name, g, i) in ready_pods
    ]
    failed = await asyncio.gather(*(one(g, i) for g, i in targets))
    return [f for f in failed if f is not None]


def remoting_config_update(
    namesrv_addr: str, timeout: float
) -> Callable[[str, dict[str, str]], Awaitable[None]]:
    async def call(addr: str, properties: dict[str, str]) -> None:
        from ferrymq.client.admin import AdminClient

        async with AdminClient(namesrv_addr, timeout=timeout, security=session.current()) as admin:
            await timeouts.within(timeout * 2, admin.update_broker_config(addr, properties))

    return call
