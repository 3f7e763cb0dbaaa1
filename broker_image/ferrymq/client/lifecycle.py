"""The lifecycle every producer and consumer shares (upstream ``ServiceState``).

A member is created, started once, shut down once (``created -> running -> shutting down ->
shut down``). It either owns its ClientInstance (built from ``namesrv_addr``) or shares one, and
it shuts an owned instance down with itself. Subclasses say which role they play and what to stop
before they leave the instance.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import ClassVar, Self

from ferrymq.client.credentials import ClientSecurity
from ferrymq.client.errors import ClientStateError
from ferrymq.client.instance import ClientInstance


class InstanceUser:
    """Something that works through a ClientInstance: its own (built from ``namesrv_addr``, shut
    down with it) or one shared with other producers, consumers and admin clients."""

    role: ClassVar[str] = "client"

    def __init__(
        self,
        namesrv_addr: str | list[str] | None,
        instance: ClientInstance | None,
        *,
        timeout: float | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        if instance is None and namesrv_addr is None:
            article = "an" if self.role[0] in "aeiou" else "a"
            raise ValueError(
                f"{article} {self.role} needs namesrv_addr (or a shared ClientInstance)"
            )
        self._own_instance = instance is None
        if instance is not None and security is not None:
            raise ValueError("give security to the shared ClientInstance, not to its members")
        # security None: FERRYMQ_ACCESS_KEY/_SECRET_KEY/_TLS_* from the environment
        if instance is None and timeout is not None:
            instance = ClientInstance(namesrv_addr or [], timeout=timeout, security=security)
        elif instance is None:
            instance = ClientInstance(namesrv_addr or [], security=security)
        self.instance = instance

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()


class ClientMember(InstanceUser):
    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None,
        instance: ClientInstance | None,
        security: ClientSecurity | None = None,
    ) -> None:
        if not group:
            raise ValueError(f"{self.role} group is empty")
        super().__init__(namesrv_addr, instance, security=security)
        self.group = group
        self._state = "created"
        self.start_timestamp_ms = 0  # when start() finished (upstream consumerStartTimestamp)

    # --- hooks ----------------------------------------------------------------------------------
    def _register(self) -> None:
        """Join the instance (as producer or consumer) before it starts."""
        raise NotImplementedError

    async def _stop_parts(self) -> None:
        """Stop what the member runs itself, before it leaves the instance."""

    async def _unregister(self) -> None:
        raise NotImplementedError

    # --- lifecycle ------------------------------------------------------------------------------
    def check_created(self) -> None:
        """Raise ClientStateError unless the member was never started (it starts only once)."""
        if self._state != "created":
            raise ClientStateError(f"{self.role} {self.group} is {self._state}; create a new one")

    def check_running(self) -> None:
        """Raise ClientStateError unless the member is started and not shut down."""
        if self._state != "running":
            raise ClientStateError(f"{self.role} {self.group} is not running ({self._state})")

    # the names subclasses used before these checks became public (push_consumer.py)
    _check_created = check_created
    _check_running = check_running

    async def start(self) -> None:
        self.check_created()
        self._register()
        await self.instance.start()
        self._state = "running"
        self.start_timestamp_ms = int(time.time() * 1000)

    async def shutdown(self) -> None:
        if self._state != "running":
            return
        self._state = "shutting down"
        await self._stop_parts()
        await self._unregister()
        if self._own_instance:
            await self.instance.shutdown()
        self._state = "shut down"
