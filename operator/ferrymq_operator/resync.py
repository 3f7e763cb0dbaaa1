"""The periodic drift-correcting pass of every custom resource, as a kopf daemon body.

A daemon that waits between passes rather than a ``kopf.timer``: a timer's interval is fixed when
its decorator runs (at import), while the operator's settings (``resync_seconds``) are read at
start-up (``ferrymq_operator.settings.load``), never at import.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

import kopf

from ferrymq_operator import timeouts

log = logging.getLogger(__name__)


async def every(
    stopped: kopf.DaemonStopped, seconds: float, what: str, once: Callable[[], Awaitable[None]]
) -> None:
    """Run ``once`` now and then ``seconds`` after each pass ends, until kopf stops the daemon
    (the resource is deleted or the operator exits). A failed pass is logged; the next retries."""
    while not stopped:
        try:
            await once()
        except Exception:  # a resync must not end the daemon: the next pass retries
            log.exception("resync of %s failed", what)
        await _pause(stopped, seconds)


async def _pause(stopped: kopf.DaemonStopped, seconds: float) -> None:
    """Wait ``seconds`` or until the daemon is stopped. Not ``stopped.wait(seconds)``: kopf runs
    that as an inner task around ``asyncio.wait_for``, which on Python 3.11 can end with
    TimeoutError when the daemon is cancelled at shutdown, and kopf re-raises it from the
    leftover task (the operator then exits with an error)."""
    with contextlib.suppress(TimeoutError):  # the interval is over: next pass
        await timeouts.within(seconds, stopped.wait())
