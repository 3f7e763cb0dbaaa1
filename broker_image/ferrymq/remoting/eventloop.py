"""Running a service on uvloop (falls back to the default loop where uvloop is unavailable), and
the pieces every long-running service (broker, NameServer) shares for a bounded shutdown.

Shutdown contract: the first SIGTERM/SIGINT asks the service to stop gracefully; the stop must
end within ``grace`` seconds. A second signal, or the grace running out, forces the process out
(``os._exit``) after logging what was still running. The deadline is kept by a thread, not by
the event loop, so even a loop stuck in a blocking call cannot keep the process alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from ferrymq.remoting.serving_marker import ServingMarker

T = TypeVar("T")

log = logging.getLogger(__name__)

# exit status of a shutdown forced by a second signal or by the grace running out
FORCED_EXIT_CODE = 3
DEFAULT_SHUTDOWN_GRACE_SECONDS = 10.0
# the signals that ask a service to stop (first one: gracefully)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a declared dependency
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(main: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


def describe_tasks(loop: asyncio.AbstractEventLoop) -> list[str]:
    """One line per unfinished task of ``loop``: its name and where its coroutine is suspended."""
    lines: list[str] = []
    try:
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError:  # the set changed while another thread walked it
        return ["(tasks could not be listed)"]
    for task in tasks:
        if task.done():
            continue
        where = ""
        coro: Any = task.get_coro()
        frame = getattr(coro, "cr_frame", None)
        # follow the await chain to the innermost suspended coroutine
        while coro is not None:
            inner = getattr(coro, "cr_await", None)
            if getattr(inner, "cr_frame", None) is None:
                break
            coro = inner
            frame = getattr(coro, "cr_frame", None)
        if frame is not None:
            where = f" at {frame.f_code.co_qualname} ({frame.f_code.co_filename}:{frame.f_lineno})"
        lines.append(f"{task.get_name()}{where}")
    return sorted(lines)


class GracefulShutdown:
    """Signal handling of one service process: first signal = stop, second or grace over = exit.

    ``requested`` is set by the first SIGTERM/SIGINT. From that moment a watchdog thread gives the
    process ``grace`` seconds; :meth:`done` (called when the graceful stop finished) disarms it.
    """

    def __init__(
        self,
        grace: float,
        *,
        name: str,
        exit_process: Callable[[int], Any] = os._exit,
    ) -> None:
        self.grace = grace
        self.name = name
        self.requested = asyncio.Event()
        self._exit = exit_process
        self._loop = asyncio.get_running_loop()
        self._signals = 0
        self._finished = threading.Event()
        self._watchdog: threading.Thread | None = None

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            self._loop.add_signal_handler(sig, self._on_signal, sig)
        # A process that re-executed itself (a controller-mode broker cutting its tail) blocks
        # these across the exec, so that a stop request in between stays pending instead of
        # killing it without a word: with the handlers in place it is delivered now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def uninstall(self) -> None:
        for sig in STOP_SIGNALS:
            self._loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info(
                "%s: %s received, stopping (at most %.1fs; a second signal forces exit)",
                self.name,
                sig.name,
                self.grace,
            )
            self.request()
            return
        self.force(f"second {sig.name} received")

    def request(self) -> None:
        """Start the graceful stop (as a first signal does) and arm the grace watchdog."""
        if self.requested.is_set():
            return
        self.requested.set()
        self._watchdog = threading.Thread(
            target=self._watch, name=f"{self.name}-shutdown-watchdog", daemon=True
        )
        self._watchdog.start()

    def _watch(self) -> None:
        if not self._finished.wait(self.grace):
            self.force(f"graceful stop did not end within {self.grace:.1f}s")

    def done(self) -> None:
        """The graceful stop finished: the watchdog stands down."""
        self._finished.set()

    def force(self, reason: str) -> None:
        """Log what was still running and leave the process at once (any thread)."""
        if self._finished.is_set():
            return
        self._finished.set()
        running = describe_tasks(self._loop)
        main = sys._current_frames().get(threading.main_thread().ident or -1)
        stack = "".join(traceback.format_stack(main, limit=4)) if main is not None else ""
        log.error(
            "%s: forcing exit (%s); still running: %s%s",
            self.name,
            reason,
            "; ".join(running) or "no tasks",
            f"\nmain thread at:\n{stack}" if stack else "",
        )
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):  # best effort on the way out
                handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        self._exit(FORCED_EXIT_CODE)


class Service(Protocol):
    """What :func:`serve_until_shutdown` runs: a server that starts, says its port, and stops."""

    @property
    def port(self) -> int: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def serve_until_shutdown(
    service: Service,
    listen_port: int,
    shutdown: GracefulShutdown,
    on_serving: Callable[[], None],
) -> None:
    """Run ``service`` from start-up until the shutdown is requested, then stop it within the grace.

    A probe marker an earlier container left for ``listen_port`` is removed before the start; once
    the service serves, its own marker is kept fresh (see :mod:`ferrymq.remoting.serving_marker`)
    and ``on_serving`` runs (the ready line a supervisor waits for). A failed start stops within
    the grace too.
    """
    shutdown.install()
    marker: ServingMarker | None = None
    try:
        stale = ServingMarker.from_env(listen_port)
        if stale is not None:
            stale.clear()  # an earlier container's marker must not vouch for this start
        await service.start()
        marker = ServingMarker.from_env(service.port)
        if marker is not None and not shutdown.requested.is_set():
            marker.start()  # the probes' evidence that the server serves (see serving_marker)
        on_serving()
        await shutdown.requested.wait()
    finally:
        shutdown.request()
        if marker is not None:
            await marker.stop()
        await service.stop()
        shutdown.done()
        shutdown.uninstall()
