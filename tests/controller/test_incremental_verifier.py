"""The chaos test's incremental verifier (``ReplicaLedger``, ``AckIndex``) on hand-made queues:
reading only what was appended since the last round, it still fails on a lost, duplicated or
reordered acknowledged message, and re-verifies a queue truncated below what it had verified."""

from __future__ import annotations

from .failover_helpers import AckIndex, ReplicaLedger, Stored, body_id

A, B = "10.0.0.1:10911", "10.0.0.2:10911"


def msgs(bodies: list[str], start: int = 0, host: str = A, clo: int = 0) -> list[Stored]:
    """Stored messages at queue offsets start.. (CommitLog offsets 100 apart from ``clo``)."""
    return [
        Stored(start + i, body_id(b.encode()), clo + 100 * (start + i), host)
        for i, b in enumerate(bodies)
    ]


def acked(*items: tuple[int, int, str]) -> AckIndex:
    index = AckIndex()
    index.update({(q, o): b.encode() for q, o, b in items})
    return index


def test_appended_rounds_verify_every_ack() -> None:
    ledger, acks = ReplicaLedger(), AckIndex()
    assert ledger.apply(0, 0, msgs(["a", "b"])) == []
    acks.update({(0, 0): b"a", (0, 1): b"b"})
    assert ledger.check_acks(acks) == ([], True)
    # next round: read from the last verified message on
    assert ledger.resume_offset(0) == 1
    assert ledger.apply(0, 1, msgs(["b", "c", "d"], start=1)) == []
    acks.update({(0, 0): b"a", (0, 1): b"b", (0, 3): b"d"})
    assert ledger.check_acks(acks) == ([], True)
    assert list(ledger.ids[0]) == [body_id(x) for x in (b"a", b"b", b"c", b"d")]
    assert ledger.truncations == []


def test_a_lost_ack_fails() -> None:
    ledger = ReplicaLedger()
    assert ledger.apply(0, 0, msgs(["a", "b"])) == []
    acks = acked((0, 0, "a"), (0, 1, "b"), (0, 2, "c"))
    problems, holds_all = ledger.check_acks(acks)
    assert problems == [] and not holds_all  # "c" is not there (a master must hold it)
    # the queue truncated below the ack of "b", "x" written in its place: reported, every time
    assert ledger.apply(0, 1, msgs(["x", "c"], start=1)) == []
    assert ledger.truncations == [(0, 2, 1)]
    for _ in range(2):
        problems, _ = ledger.check_acks(acks)
        assert problems == ["acked message at queue 0 offset 1: another one read"]


def test_an_ack_arriving_after_its_offset_was_verified_is_checked() -> None:
    ledger, acks = ReplicaLedger(), AckIndex()
    assert ledger.apply(0, 0, msgs(["a", "b", "c"])) == []
    acks.update({(0, 0): b"a"})
    assert ledger.check_acks(acks) == ([], True)
    acks.update({(0, 0): b"a", (0, 2): b"other"})  # acked at offset 2, another message there
    problems, _ = ledger.check_acks(acks)
    assert problems == ["acked message at queue 0 offset 2: another one read"]
    assert ledger.check_acks(acks)[0] == problems  # not forgotten on the next poll


def test_a_duplicate_fails_within_and_across_queues() -> None:
    ledger = ReplicaLedger()
    assert ledger.apply(0, 0, msgs(["a", "b"])) == []
    assert ledger.apply(0, 1, msgs(["b", "a"], start=1)) == [
        f"queue 0 offset 2: a message held twice (id {body_id(b'a'):x})"
    ]
    assert ledger.verified(0) == 2  # the duplicate is not taken in: read again, failed again
    assert ledger.apply(1, 0, msgs(["c", "b"])) != []
    assert ledger.verified(1) == 1


def test_a_reordered_ack_fails() -> None:
    ledger = ReplicaLedger()
    acks = acked((0, 0, "a"), (0, 1, "b"), (0, 2, "c"))
    assert ledger.apply(0, 0, msgs(["a", "c", "b"])) == []
    problems, _ = ledger.check_acks(acks)
    assert problems == [
        "acked message at queue 0 offset 1: another one read",
        "acked message at queue 0 offset 2: another one read",
    ]
    # and a replica whose queue is in another order differs from the master's
    master = ReplicaLedger()
    assert master.apply(0, 0, msgs(["a", "b", "c"])) == []
    assert ledger.differs_from(master) == [0]
    assert master.differs_from(master) == []


def test_offsets_must_be_contiguous() -> None:
    ledger = ReplicaLedger()
    assert ledger.apply(0, 0, msgs(["a", "b"])) == []
    gap = msgs(["b"], start=1) + msgs(["d"], start=3)
    assert ledger.apply(0, 1, gap) == ["queue 0: offset 3 read where 2 was due"]
    assert ledger.apply(0, 5, msgs(["z"], start=5)) == [
        "queue 0: read from 5, beyond the 2 verified"
    ]


def test_a_truncated_tail_is_re_verified_from_the_truncation_point() -> None:
    old_master = ReplicaLedger()
    assert old_master.apply(0, 0, msgs(["a", "b", "c", "d"])) == []
    acks = acked((0, 0, "a"), (0, 1, "b"))  # "c" and "d" were never acknowledged
    assert old_master.check_acks(acks) == ([], True)
    # rejoined as a slave: cut back to 2, then the new master's "e", "f" replicated
    new_tail = msgs(["e", "f"], start=2, host=B, clo=1000)
    assert old_master.apply(0, 1, msgs(["b"], start=1) + new_tail) == []
    assert old_master.truncations == [(0, 4, 2)]
    assert list(old_master.ids[0]) == [body_id(x) for x in (b"a", b"b", b"e", b"f")]
    # "c" and "d" are no longer held: written again later, they are no duplicate
    assert old_master.apply(1, 0, msgs(["c"])) == []
    acks.update({(0, 0): b"a", (0, 1): b"b", (0, 2): b"e"})
    assert old_master.check_acks(acks) == ([], True)
    # max offset smaller: the queue ends below what was verified
    assert old_master.apply(0, 1, msgs(["b"], start=1)) == []
    assert old_master.truncations[-1] == (0, 4, 2)
    problems, holds_all = old_master.check_acks(acks)
    assert problems == [] and not holds_all  # the acked "e" is gone: a master would fail


def test_one_writer_per_epoch_is_counted_incrementally() -> None:
    ledger = ReplicaLedger()
    epochs = [(1, 0)]
    assert ledger.apply(0, 0, msgs(["a", "b"], host=A)) == []
    assert ledger.epoch_writers(epochs) == []
    epochs = [(1, 0), (2, 1000)]
    assert ledger.apply(0, 1, msgs(["b"], start=1) + msgs(["c"], start=2, host=B, clo=1000)) == []
    assert ledger.epoch_writers(epochs) == []
    # a message of broker A inside epoch 2's range: two writers in one epoch
    assert (
        ledger.apply(0, 2, msgs(["c"], start=2, host=B, clo=1000) + msgs(["d"], 3, A, 1000)) == []
    )
    assert ledger.epoch_writers(epochs) == [f"epoch 2 written by {sorted([A, B])}"]
