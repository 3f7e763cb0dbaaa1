"""Indexing a dispatch round at once writes the same index files as indexing record by record."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ferrymq.message import MessageSysFlag, java_string_hash
from ferrymq.store.index_file import index_key_hash
from ferrymq.store.index_service import IndexService, index_key_hashes, java_string_hashes
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet="ABCDEF0123456789", min_size=32, max_size=32),
            st.text(max_size=40),
            st.text(alphabet="xyz#", min_size=5, max_size=5),
        ),
        max_size=60,
    )
)
def test_batched_java_hashes_equal_the_scalar_ones(texts: list[str]) -> None:
    assert java_string_hashes(texts, {}) == [java_string_hash(t) for t in texts]
    if texts:
        # the round's key hashes: same-length ASCII keys in one product, anything else per key
        assert index_key_hashes(texts, {}).tolist() == [index_key_hash(t) for t in texts]
        same = [t.ljust(40, "k")[:40] for t in texts if t.isascii()]
        if same:
            assert index_key_hashes(same, {}).tolist() == [index_key_hash(t) for t in same]


@dataclass
class Req:
    topic: str
    keys: list[str]
    uniq_key: str | None
    commit_log_offset: int
    store_timestamp: int
    sys_flag: int = 0
    extra: dict[str, str] = field(default_factory=dict)


def requests(rng: random.Random, count: int, start: int, ts_step: int = 1) -> list[Req]:
    out = []
    offset = start
    for i in range(count):
        offset += rng.randint(100, 2000)
        keys = rng.choice([[], ["k1"], ["order-7", "user-9"], ["ключ"]])
        uniq = None if rng.random() < 0.1 else f"AC110001{i:024X}"
        flag = rng.choice([0, 0, 0, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE])
        out.append(
            Req(
                rng.choice(["T", "TopicB"]),
                keys,
                uniq,
                offset,
                1_700_000_000_000 + i * ts_step,
                flag,
            )
        )
    return out


@pytest.mark.parametrize(("seed", "ts_step"), [(3, 1), (4, 1700), (5, 0)])
def test_round_index_equals_per_record_index(tmp_path: Path, seed: int, ts_step: int) -> None:
    """Byte for byte the files one put_key per key writes: rounds small and large (the numpy
    path), keys colliding in 64 slots, rounds crossing file ends, entries seconds apart."""
    rng = random.Random(seed)
    one = IndexService(tmp_path / "one", 64, 150)  # small files: rounds cross file ends
    many = IndexService(tmp_path / "many", 64, 150)
    offset = 0
    try:
        for _ in range(12):
            batch = requests(rng, rng.randint(1, 40), offset, ts_step)
            offset = batch[-1].commit_log_offset
            for r in batch:
                one.build_index(
                    r.topic, r.keys, r.uniq_key, r.commit_log_offset, r.store_timestamp, r.sys_flag
                )
            many.build_index_many(batch)
            # a re-dispatch of the same round adds nothing
            many.build_index_many(batch)
        assert len(one.files) == len(many.files) > 1
        for a, b in zip(one.files, many.files, strict=True):
            assert bytes(a.mapped_file.buffer) == bytes(b.mapped_file.buffer)
        assert one.end_phy_offset == many.end_phy_offset
        found, _, _ = many.query_offsets("T", "k1", 100, 0, 2**62)
        assert found == one.query_offsets("T", "k1", 100, 0, 2**62)[0]
    finally:
        one.shutdown()
        many.shutdown()
