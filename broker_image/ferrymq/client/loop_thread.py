"""An event loop on a background thread, for blocking clients' background work.

``SyncProducer`` keeps its route cache, NameServer lookups and heartbeats on such a loop (they
are the asyncio client's own code) while its sends block the caller's thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ferrymq.remoting.eventloop import new_event_loop

T = TypeVar("T")

_START_TIMEOUT_S = 10.0


class LoopThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name}: the loop thread was started already")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT_S):  # pragma: no cover - a thread that never runs
            raise RuntimeError(f"{self.name}: the loop thread did not start")

    def _run(self) -> None:
        loop = self._loop = new_event_loop()
        asyncio.set_event_loop(loop)
        loop.call_soon(self._ready.set)
        try:
            loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks, timeout=_START_TIMEOUT_S))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (``TimeoutError`` after ``timeout``)."""
        loop = self._loop
        if loop is None or not self.running:
            coro.close()
            raise RuntimeError(f"{self.name}: the loop thread is not running")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(f"{self.name}: a blocking call from the loop's own thread")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"{self.name}: no result within {timeout}s") from None

    def stop(self) -> None:
        """Stop the loop (its tasks are cancelled) and wait for the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_START_TIMEOUT_S * 2)
