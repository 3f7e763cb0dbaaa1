"""The comparison can fail: a ferrymq answer with a queue offset off by one is reported, and the
normaliser evens out only hosts, ports, ids and timestamps."""

from __future__ import annotations

import copy

import pytest

from .differential import PERM_RW, assert_same, observe
from .java_runner import JavaScenarios
from .normalise import normalise
from .reference import Target

# the session fixtures start two clusters and a JVM (minutes on a loaded 2-core machine): room for
# the first test's setup; a scenario itself is bounded by its own timeouts
pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("java_client", ["4.9.8"], indirect=True)
def test_a_queue_offset_off_by_one_fails_the_comparison(
    java_client: JavaScenarios, targets: list[Target]
) -> None:
    topic = "CanFail_498"
    seen = {
        t.name: observe(
            java_client,
            t,
            "produce",
            topics={topic: (1, PERM_RW)},
            topic=topic,
            group="PG_can_fail",
            count=2,
        )
        for t in targets
    }
    assert_same(seen, "the real answers")  # equal as answered
    wrong = copy.deepcopy(seen)
    wrong["ferrymq"][1]["queueOffset"] += 1  # ferrymq answering offset 2 for the second send
    with pytest.raises(AssertionError, match=r'(?s)-\s+"queueOffset": 1,.*\+\s+"queueOffset": 2,'):
        assert_same(wrong, "the perturbed answers")


def test_normaliser_keeps_everything_but_hosts_ids_and_times() -> None:
    def obs(offset: int, host: str, msg_id: str) -> dict[str, object]:
        return {
            "status": "SEND_OK",
            "queueOffset": offset,
            "storeHost": f"/127.0.0.1:{host}",
            "msgId": msg_id,
            "bornTimestamp": int(host) * 7,
            "properties": {"UNIQ_KEY": msg_id, "seq": "1"},
            "remark": f"CODE: 16 DESC: forbidden BROKER: 127.0.0.1:{host}",
        }

    a = normalise(obs(1, "10911", "C0A8000100002A9F0000000000000001"))
    b = normalise(obs(1, "20911", "7F00000100002A9F00000000000000FF"))
    assert a == b
    assert a["properties"]["UNIQ_KEY"] == a["msgId"] == "<id:1>"  # equality of ids kept
    assert normalise(obs(2, "10911", "C0A8000100002A9F0000000000000001")) != a
    other = obs(1, "10911", "C0A8000100002A9F0000000000000001")
    other["properties"] = {"UNIQ_KEY": "C0A8000100002A9F0000000000000001", "seq": "2"}
    assert normalise(other) != a
