"""Pure decisions of a controller-mode replica (no I/O): what a slave does with the controller's
answer (:mod:`ferrymq.broker.role_switch` carries them out)."""

from __future__ import annotations

import enum

from ferrymq.controller.protocol import ReplicaInfo


class SlaveStep(enum.Enum):
    WAIT = "wait"  # no master, or the master has not published its addresses yet
    FOLLOW = "follow"  # a new master (or a new epoch): compare epoch files, then replicate
    POINT = "point"  # the master followed already: point replication at its published addresses


def slave_step(info: ReplicaInfo, *, following: str | None, known_epoch: int | None) -> SlaveStep:
    """The step a slave takes on an answer naming another broker as master.

    POINT is taken on every answer about the master it follows, not only on a change of master:
    a replica that joined while the master's HA listener was not up yet learnt the master's
    broker address but no HA address, and the address arrives in a later answer of the same
    epoch (the parallel start of a StatefulSet's pods; issue 34)."""
    if info.master_broker_id is None or not info.master_addr or not info.master_ha_addr:
        return SlaveStep.WAIT
    if following != info.master_addr or (
        known_epoch is not None and info.master_epoch != known_epoch
    ):
        return SlaveStep.FOLLOW
    return SlaveStep.POINT
