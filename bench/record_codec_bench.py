"""Fixed work over the record hot paths: single appends, uniform batch appends, the reput's
round parser, the recovery validator and the client's pull decoder (IPv4 records).

Usage: ``python bench/record_codec_bench.py [N]``; compare two trees by the CPU time of the
whole process (``/usr/bin/time -v``), run in turn, e.g. with ``PYTHONPATH=<other>/broker_image``.
"""

import sys
import tempfile
from pathlib import Path

from ferrymq.message import Message, MessageInner, encode_batch
from ferrymq.store import record as rec
from ferrymq.store.commit_log import CommitLog
from ferrymq.store.dispatch import parse_round

N = int(sys.argv[1]) if len(sys.argv) > 1 else 40000
props = {"UNIQ_KEY": "0A0B0C0D0E0F00112233445566778899", "WAIT": "true", "TAGS": "TagA"}
with tempfile.TemporaryDirectory() as d:
    log = CommitLog(Path(d), 256 << 20, ("127.0.0.1", 10911), 4 << 20)
    log.mapped_file_queue.load()
    m = MessageInner.create(
        "BenchTopic", 0, b"x" * 512, props, born_timestamp=1, born_host=("127.0.0.1", 40000)
    )
    for _ in range(N):
        log.put_message(m, now_ms=5)
    body = encode_batch([Message("BenchTopic", b"y" * 512, properties=props) for _ in range(32)])
    for _ in range(N // 32):
        log.put_batch_body(m, body, now_ms=5)
    mf = log.mapped_file_queue.get_last_mapped_file()
    data = bytes(mf.buffer[: mf.wrote_position])
    view = memoryview(data)
    for _ in range(2):
        reqs, end, stop = parse_round(view, 0, len(data), -1, [1000])
        assert len(reqs) == N + (N // 32) * 32
        pos = 0
        while pos < len(data):
            kind, size, _p, _t = rec.validate_record(view, pos, len(data), True)
            assert kind is rec.RecordKind.MESSAGE
            pos += size
        chunk = 64 * 1024
        total = 0
        p = 0
        while p < len(data):
            q = p
            while q < len(data) and q - p < chunk:
                q += int.from_bytes(data[q : q + 4], "big")  # TOTALSIZE: pull-sized slices
            total += len(rec.decode_messages(data[p:q]))
            p = q
        assert total == len(reqs)
    view.release()
    log.mapped_file_queue.shutdown()
