"""AclService: the live ACL of one server (broker or NameServer): the current table, the request
guard installed in the server's ProcessorTable, refusal counters, and reload on file change.

Reload: every ``check_interval`` seconds the set of ACL files and their (mtime, size) are
compared with the last load; on a change the files are read again in a thread and the new table
replaces the old one in one assignment, so a request is judged by one table or the other, never
a mix. A file that fails to load keeps the previous table (and says why in the log and in the
``ferrymq_acl_reload_failures`` counter): a typo must not open or close the broker to everyone.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ferrymq.acl.permission import ADMIN_CODES, REGISTRATION_CODES
from ferrymq.acl.plain_config import AclConfigError, AclTable, load_table
from ferrymq.acl.validator import Refusal, decide, host_of
from ferrymq.remoting.codes import ResponseCode
from ferrymq.remoting.command import RemotingCommand
from ferrymq.tasks import Periodic

if TYPE_CHECKING:
    from ferrymq.remoting.channel import Channel

log = logging.getLogger(__name__)

REGISTRATION_HINT = (
    "a broker registers with an ACL-enabled NameServer as an admin account: give the broker "
    "innerClientAuthenticationCredentials in broker.conf or FERRYMQ_ACCESS_KEY/FERRYMQ_SECRET_KEY"
)

Stamp = tuple[tuple[str, int, int], ...]


def stamp_of(paths: list[Path]) -> Stamp:
    """(path, mtime_ns, size) of each file; a vanished file stamps as (path, -1, -1)."""
    out: list[tuple[str, int, int]] = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            out.append((str(path), -1, -1))
            continue
        out.append((str(path), st.st_mtime_ns, st.st_size))
    return tuple(out)


class AclService:
    def __init__(
        self,
        find_files: Callable[[], list[Path]],
        *,
        name: str = "broker",
        check_interval: float = 1.0,
    ) -> None:
        self.find_files = find_files
        self.name = name
        self.check_interval = check_interval
        self.table = AclTable()
        self.refused: Counter[tuple[int, str]] = Counter()
        self.reloads = 0
        self.reload_failures = 0
        self._stamp: Stamp = ()
        # a polling cadence: stat() of a few files per interval
        self._loop = Periodic(f"{name}-acl-reload", self.reload_if_changed, check_interval)

    # --- loading ------------------------------------------------------------------------------
    def load(self) -> None:
        """Load the files now; AclConfigError when there are none or one is bad (start-up)."""
        paths = self.find_files()
        stamp = stamp_of(paths)
        self.table = load_table(paths)
        self._stamp = stamp
        log.info(
            "%s ACL loaded: %d account(s), %d global white address(es) from %s",
            self.name,
            len(self.table.accounts),
            len(self.table.global_white),
            ", ".join(str(p) for p in paths),
        )

    def changed(self) -> bool:
        return stamp_of(self.find_files()) != self._stamp

    async def reload_if_changed(self) -> bool:
        """Reload when a file changed; True when a new table is in force."""
        paths = await asyncio.to_thread(self.find_files)
        stamp = await asyncio.to_thread(stamp_of, paths)
        if stamp == self._stamp:
            return False
        try:
            table = await asyncio.to_thread(load_table, paths)
        except AclConfigError as exc:
            self.reload_failures += 1
            log.error("%s ACL not reloaded, previous accounts kept: %s", self.name, exc)
            self._stamp = stamp  # report a bad file once, not every second
            return False
        self.table = table
        self._stamp = stamp
        self.reloads += 1
        log.info(
            "%s ACL reloaded: %d account(s) from %s",
            self.name,
            len(table.accounts),
            ", ".join(str(p) for p in paths),
        )
        return True

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    # --- the guard ----------------------------------------------------------------------------
    def judge(self, remote_addr: str, request: RemotingCommand) -> Refusal | None:
        try:
            return decide(self.table, host_of(remote_addr), request)
        except Exception as exc:  # fail closed: a request the checker cannot read is refused
            log.exception("%s ACL check of code %d failed", self.name, request.code)
            return Refusal("check_failed", f"ACL: request could not be checked: {exc}")

    def guard(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        if request.is_response:
            return None
        refusal = self.judge(channel.remote_addr, request)
        if refusal is None:
            return None
        self.refused[(request.code, refusal.reason)] += 1
        log.info(
            "%s refused code %d from %s: %s",
            self.name,
            request.code,
            channel.remote_addr,
            refusal.remark,
        )
        return request.response(ResponseCode.NO_PERMISSION, refusal.remark)

    def admin_guard(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        """The NameServer's guard: only admin codes are checked (route lookups stay open, as
        clients and brokers of upstream 4.x send them unsigned)."""
        if request.code not in ADMIN_CODES:
            return None
        refused = self.guard(channel, request)
        if refused is not None and request.code in REGISTRATION_CODES:
            refused.remark = f"{refused.remark}; {REGISTRATION_HINT}"
        return refused
