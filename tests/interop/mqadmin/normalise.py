"""The one normaliser of the mqadmin suite: what must differ between two clusters (hosts, ports,
ids, timestamps, versions, measured rates) is replaced by placeholders; everything else a user
reads is kept. Pure functions over text.

Per command, a *view* picks what is comparable at all: most commands compare their whole output;
``brokerStatus`` compares its key set (the values are live counters), ``getBrokerConfig`` and
``getNamesrvConfig`` the key set (values are compared by their own tests).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

_TRACE = re.compile(r"^\s*(at [\w$.<>/]+\(.*\)|\.\.\. \d+ more)\s*$")
_FAQ = re.compile(r"^For more information, please visit the url,.*$")
_ADDR = re.compile(r"/?\b(?:\d{1,3}\.){3}\d{1,3}:\d{2,5}\b")
# offset msgIds (32 hex digits) and client unique keys (32, or 56 when the host has an IPv6 address)
_HEX_ID = re.compile(r"\b[0-9A-F]{32,}\b")
_CLIENT_ID = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}@[\w#.\-]+")
_DATETIME = re.compile(r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d{3})?\b")
_EPOCH_MS = re.compile(r"\b1[6-9]\d{11}\b")
# UtilAll.timeMillisToHumanString (yyyyMMddHHmmssSSS): ProcessQueueInfo's lock/pull/consume times
_HUMAN_MS = re.compile(r"\b(?:19|20)\d{15}\b")
# store paths (a brokerStatus key names the CommitLog directory)
_PATH = re.compile(r"(?<![A-Za-z0-9/])/(?:tmp|root|home|var)/[^\s,;\]}]*")
# where a record sits in the CommitLog: Apache writes its own system messages at start-up first
_CL_OFFSET = re.compile(r"(commitLogOffset=|CommitLog Offset:\s+)\d+|(@)\d+(?=\s*$)")
_VERSION = re.compile(r"\bV\d+_\d+_\d+(?:_SNAPSHOT)?\b")
_SPACES = re.compile(r"[ \t]+")


def substitute(text: str, addrs: dict[str, str]) -> str:
    """Placeholders for the named addresses (``{"127.0.0.1:20111": "<NS>"}``), then any other
    address, ids, times and versions."""
    for addr, name in sorted(addrs.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(r"/?" + re.escape(addr) + r"\b", name, text)
    text = _PATH.sub("<PATH>", text)
    text = _CLIENT_ID.sub("<CLIENTID>", text)
    text = _ADDR.sub("<ADDR>", text)
    text = _HEX_ID.sub("<MSGID>", text)
    text = _DATETIME.sub("<TIME>", text)
    text = _EPOCH_MS.sub("<TS>", text)
    text = _HUMAN_MS.sub("<TIME>", text)
    text = "\n".join(
        _CL_OFFSET.sub(lambda m: (m.group(1) or m.group(2)) + "<CLOFFSET>", ln)
        for ln in text.splitlines()
    )
    return _VERSION.sub("<VERSION>", text)


_PROPS = re.compile(r"((?:Properties: |properties=)\{)([^{}]*)(\})")


def _sorted_props(match: re.Match[str]) -> str:
    items = sorted(item.strip() for item in match.group(2).split(","))
    return match.group(1) + ", ".join(items) + match.group(3)


def lines(text: str) -> list[str]:
    """Non-empty lines with runs of blanks as one space (column widths follow value lengths);
    Java stack frames dropped (their depth depends on where a call failed, not on the answer)."""
    out = []
    for line in text.splitlines():
        if _TRACE.match(line) or _FAQ.match(line):
            continue
        # message properties print as a Java HashMap: the order follows the map's history
        line = _PROPS.sub(_sorted_props, _SPACES.sub(" ", line).strip())
        if line:
            out.append(line)
    return out


def keys_view(text: str, sep: str) -> list[str]:
    """The sorted keys of ``key<sep>value`` lines (brokerStatus: ``key : value``)."""
    keys = set()
    for line in text.splitlines():
        key, found, _ = line.partition(sep)
        if found and key.strip() and not key.strip().startswith("="):
            keys.add(key.strip())
    return sorted(keys)


def only_lines_with(words: Iterable[str]) -> Callable[[list[str]], list[str]]:
    """A view keeping header lines (starting with '#') and lines naming one of ``words``, sorted
    (list commands over a cluster shared with other tests; mqadmin prints Java HashSet order,
    which follows the size of the whole set)."""
    wanted = tuple(words)

    def view(found: list[str]) -> list[str]:
        head = [ln for ln in found if ln.startswith("#")]
        return head + sorted(
            ln for ln in found if not ln.startswith("#") and any(w in ln for w in wanted)
        )

    return view


_NUMBER = re.compile(r"-?\b\d+\.\d+\b")
_RT = re.compile(r"\brt=\d+ms\b")


def without_rates(found: list[str]) -> list[str]:
    """Decimal figures (TPS, RT in ms, disk ratios) replaced: they measure the run, not the
    answer."""
    return [_RT.sub("rt=<N>ms", _NUMBER.sub("<N>", ln)) for ln in found]


def running_info_view(found: list[str]) -> list[str]:
    """consumerStatus -i (ConsumerRunningInfo.formatString): rates replaced, and the rows of the
    group's ``%RETRY%`` queue in the offset and queue tables dropped: whether its offset reads
    -1 or 0 depends only on whether the live consumer had yet committed offset 0 for the empty
    retry queue (as :func:`is_empty_retry_row`). Its subscription line stays."""
    return [ln for ln in without_rates(found) if not ln.startswith("%RETRY%")]


def is_empty_retry_row(cols: list[str]) -> bool:
    """A ``%RETRY%`` queue row with broker and consumer offset 0: whether it is listed depends only
    on whether the live consumer had yet committed offset 0 for its empty retry queue (the client
    persists every 5 s), on either broker; it carries no other information."""
    return (
        len(cols) > 4
        and cols[0].startswith("%RETRY%")
        and cols[2].isdigit()
        and cols[3] == cols[4] == "0"
    )


def progress_view(found: list[str]) -> list[str]:
    """consumerProgress -g: rates replaced, and the Inflight column (pull offset - committed
    offset), which depends on whether a closed consumer's long-polling pull was still held when
    messages arrived: Apache serves a held pull after its client has gone, which moves the pull
    offset (and statsAll's OutMsg24Hour); ferrymq drops held pulls with their connection."""
    out = []
    for line in without_rates(found):
        cols = line.split(" ")
        if is_empty_retry_row(cols):
            continue
        if len(cols) == 8 and not line.startswith("#") and cols[2].isdigit():
            cols[6] = "<INFLIGHT>"
            line = " ".join(cols)
        elif line.startswith("Consume Inflight Total:"):
            line = "Consume Inflight Total: <INFLIGHT>"
        out.append(line)
    return out


def stats_all_view(found: list[str]) -> list[str]:
    """statsAll: rates replaced, and the 24-hour sums: upstream sums sampled minute/hour
    statistics, so puts of the last sampling interval are not in InMsg24Hour yet; OutMsg24Hour
    also counts held pulls served after their client left (see :func:`progress_view`)."""
    out = []
    for line in without_rates(found):
        cols = line.split(" ")
        if not line.startswith("#") and len(cols) == 7:
            cols[5:7] = ["<IN24H>", "<OUT24H>"]
            line = " ".join(cols)
        out.append(line)
    return out


_PERM_COUNT = re.compile(r"(write perm of broker\[[^\]]*\] in name server\[[^\]]*\] OK), \d+$")


def perm_count_view(found: list[str]) -> list[str]:
    """wipeWritePerm/addWritePerm: the count of topics changed is every topic of the broker, and
    Apache creates system topics ferrymq does not have (POP revive, timer wheel, RocksDB
    transaction, reply and sync-member topics: tests/interop/README.md)."""
    return [_PERM_COUNT.sub(r"\1, <TOPICS>", ln) for ln in found]


_EPOCH_OFFSETS = re.compile(r"(startOffset|endOffset)=\d+")


def epoch_view(found: list[str]) -> list[str]:
    """getBrokerEpoch: one block per broker address, printed in the order of a Java HashSet of
    address strings (which follows the ports, not the roles), so the blocks are sorted; and the
    epochs' start and end offsets are CommitLog positions (Apache writes its own system messages
    at start-up first), so they are replaced. Epoch numbers and how many there are stay."""
    blocks: list[list[str]] = []
    for line in found:
        if line.startswith("#clusterName") or not blocks:
            blocks.append([])
        blocks[-1].append(_EPOCH_OFFSETS.sub(r"\1=<CLOFFSET>", line))
    return [ln for block in sorted(blocks) for ln in block]


def route_view(found: list[str]) -> list[str]:
    """clusterList in controller mode: who is listed as master (brokerId 0) and slave, at which
    address, and ACTIVATED; the figures between (version, TPS, timer, disk) are not the
    election's."""
    out = []
    for line in found:
        cols = line.split(" ")
        if not line.startswith("#") and len(cols) > 4:
            out.append(" ".join([*cols[:4], cols[-1]]))
    return sorted(out)
