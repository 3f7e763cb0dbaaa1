"""A controller answer of an older epoch than the broker knows is ignored (issue 34).

Found by the partition harness (controller cut off, then healed): the controller elected broker 1
(epoch 3) and notified it; the answer to a heartbeat broker 1 had sent just before, "no master,
epoch 2", arrived after the notification. Applied, it marked the new master superseded: it never
acknowledged a write again, nor grew its SyncStateSet, and the group stayed without a writable
master for good.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ferrymq.broker.controller_mode_config import ControllerModeSettings
from ferrymq.broker.role_switch import ControllerMode
from ferrymq.controller.protocol import ReplicaInfo


async def test_a_master_ignores_an_answer_of_an_older_epoch(tmp_path: Path) -> None:
    app = SimpleNamespace(
        config=SimpleNamespace(broker_id=1, broker_name="broker-a"),
        store_config=SimpleNamespace(store_path_root_dir=tmp_path),
    )
    settings = ControllerModeSettings(enable_controller_mode=True, controller_addr="127.0.0.1:9878")
    mode = ControllerMode(app, settings)  # type: ignore[arg-type]
    # just promoted by the notification of epoch 3
    mode.is_master = True
    mode.master_epoch = 3
    mode.known = ReplicaInfo(1, "127.0.0.1:1", "127.0.0.1:2", 3, frozenset({1}))
    mode.lease_until = float("inf")
    await mode._apply(ReplicaInfo(None, "", "", 2, frozenset({1, 2, 3})), None)
    assert not mode.superseded
    assert mode.may_ack
    assert mode.known.master_epoch == 3
