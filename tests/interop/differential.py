"""Running one scenario against Apache RocketMQ and against ferrymq, and comparing what the user saw
after :func:`normalise.normalise`. A difference fails with both observations side by side."""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ferrymq.client.admin import AdminClient
from ferrymq.client.credentials import ClientSecurity
from polling import wait_for

from .normalise import normalise
from .reference import Target

PERM_RW = 6


class Scenarios(Protocol):
    """A client's scenario program (java_runner.JavaScenarios, go_runner.GoScenarios)."""

    client: str

    def run(self, scenario: str, namesrv: str, timeout_s: int = 60, **args: Any) -> Any: ...


async def _create_topics(
    namesrv: str, topics: Mapping[str, tuple[int, int]], security: ClientSecurity | None
) -> None:
    async with AdminClient(namesrv, security=security) as admin:
        for topic, (queues, perm) in topics.items():
            await admin.create_topic(
                topic, read_queue_nums=queues, write_queue_nums=queues, perm=perm
            )

        async def routed() -> bool:
            for topic in topics:
                route = await admin.instance.namesrv.get_route(topic)
                if route is None or not route.queue_datas:
                    return False
            return True

        await wait_for(routed, timeout=30, what=f"routes of {sorted(topics)}")


def create_topics(target: Target, topics: Mapping[str, tuple[int, int]]) -> None:
    """``topics``: name -> (queue count, perm), created on every broker of ``target``."""
    asyncio.run(_create_topics(target.namesrv_addr, topics, target.security))


def observe(
    runner: Scenarios,
    target: Target,
    scenario: str,
    *,
    topics: Mapping[str, tuple[int, int]] | None = None,
    prepare: Callable[[Any], Any] | None = None,
    **args: Any,
) -> Any:
    """Create ``topics`` on ``target``, run ``scenario`` there; the normalised observation.
    ``prepare`` evens out, before ids are numbered, what the scenario itself leaves open."""
    if topics:
        create_topics(target, topics)
    raw = runner.run(scenario, target.namesrv_addr, **args)
    return normalise(prepare(raw) if prepare is not None else raw)


def assert_same(observations: Mapping[str, Any], what: str) -> None:
    """Every observation equals the oracle's (``observations["apache"]``)."""
    oracle = observations["apache"]
    for name, seen in observations.items():
        if seen != oracle:
            diff = difflib.unified_diff(
                json.dumps(oracle, indent=1, sort_keys=True).splitlines(),
                json.dumps(seen, indent=1, sort_keys=True).splitlines(),
                "apache",
                name,
                n=4,
                lineterm="",
            )
            raise AssertionError(f"{what}: {name} differs from Apache RocketMQ\n" + "\n".join(diff))


def differential(
    runner: Scenarios,
    targets: list[Target],
    scenario: str,
    *,
    topics: Mapping[str, tuple[int, int]] | None = None,
    check: Callable[[Any], None] | None = None,
    prepare: Callable[[Any], Any] | None = None,
    **args: Any,
) -> Any:
    """Run ``scenario`` against each target (the oracle first), ``check`` the oracle's
    observation (the scenario itself is right), and require the others to equal it. Returns
    the oracle's observation."""
    seen = {
        t.name: observe(runner, t, scenario, topics=topics, prepare=prepare, **args)
        for t in targets
    }
    if check is not None:
        check(seen["apache"])
    assert_same(seen, f"{scenario} on client {runner.client}")
    return seen["apache"]
