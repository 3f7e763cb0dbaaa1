"""A file that says "this server is serving", kept fresh by its event loop, for cheap probes.

Kubernetes exec probes that start a Python interpreter cost about a second of CPU each; on a
loaded node they outlive their timeouts, pile up and keep pods un-Ready. Instead the server, once
it listens and serves (issue 23: ready only then), touches ``<dir>/serving-<port>`` every
``interval`` seconds from its own event loop, and the probe is a shell test of the file's age
(``find FILE -newermt '-N seconds'``). A stuck loop stops the touches, so the file goes stale and
the liveness probe fails, as the remoting round trip of ``ferrymq probe`` would. The port in the
name makes the probe follow the pod's own port (per-pod ports on the host network).

The directory comes from ``FERRYMQ_PROBE_DIR`` (the operator points it at the pod's /tmp emptyDir);
without it nothing is written. A file left by an earlier container of the same pod (the emptyDir
outlives a container restart) is removed before the server starts, so it never vouches for a
server that does not serve yet.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from ferrymq.tasks import Periodic

log = logging.getLogger(__name__)

PROBE_DIR_ENV = "FERRYMQ_PROBE_DIR"
# How often the loop touches the file; probes allow several missed touches (see the operator).
TOUCH_INTERVAL_S = 2.0


def marker_path(directory: Path, port: int) -> Path:
    """The file a server on ``port`` keeps fresh (the operator's probes build the same name)."""
    return directory / f"serving-{port}"


class ServingMarker:
    """Touches ``marker_path(directory, port)`` every ``interval`` seconds while started."""

    def __init__(self, directory: Path, port: int, interval: float = TOUCH_INTERVAL_S) -> None:
        self.path = marker_path(directory, port)
        self.interval = interval
        # a cadence: the probe reads the file's age
        self._loop = Periodic(f"probe-marker-{port}", self._refresh, interval)

    @classmethod
    def from_env(cls, port: int) -> ServingMarker | None:
        directory = os.environ.get(PROBE_DIR_ENV)
        return cls(Path(directory), port) if directory else None

    def clear(self) -> None:
        """Remove a marker an earlier process left (before the server serves)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def touch(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()

    def start(self) -> None:
        """Call once the server serves: writes the marker now, then keeps it fresh."""
        self.touch()
        self._loop.start()

    def _refresh(self) -> None:
        try:
            self.touch()
        except OSError as exc:
            # a full or read-only /tmp: the probe fails and says why in the pod's events
            log.error("cannot touch the probe file %s: %s", self.path, exc)

    async def stop(self) -> None:
        """Stop touching and remove the marker: a stopping server is not ready."""
        await self._loop.stop()
        self.clear()
