"""Pure ACL decisions: signature (checked against the openssl CLI), address patterns, permission
bits, request code -> resources, plain_acl.yml parsing and the decision order."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from ferrymq.acl import permission as perm
from ferrymq.acl.plain_config import AclConfigError, acl_files, build_table, parse_acl_text
from ferrymq.acl.remote_address import AddressPattern
from ferrymq.acl.resources import needed_permissions
from ferrymq.acl.signature import cal_signature, combine_content, sign_fields
from ferrymq.acl.validator import (
    REASON_BAD_SIGNATURE,
    REASON_NO_ACCESS_KEY,
    REASON_NO_GROUP_PERM,
    REASON_NO_TOPIC_PERM,
    REASON_NOT_ADMIN,
    REASON_UNKNOWN_ACCESS_KEY,
    decide,
)
from ferrymq.remoting.codes import RequestCode
from ferrymq.remoting.command import RemotingCommand
from security_helpers import ADMIN_AK, ADMIN_SK, APP_AK, APP_SK, PLAIN_ACL


def table():  # type: ignore[no-untyped-def]
    return build_table([(None, parse_acl_text(PLAIN_ACL))])


def signed(
    code: int, ext: dict[str, str], body: bytes | None = None, ak: str = APP_AK, sk: str = APP_SK
) -> RemotingCommand:
    request = RemotingCommand.request(code, ext, body)
    sign_fields(request.ext_fields, body, ak, sk)
    return request


def test_content_is_sorted_values_without_signature_then_body() -> None:
    ext = {"b": "2", "a": "1", "Signature": "x", "AccessKey": "K", "_UNIQUE_KEY_QUERY": "q"}
    assert combine_content(ext, b"BODY") == b"K12BODY"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI absent")
def test_signature_matches_openssl_hmac_sha1() -> None:
    content = combine_content({"topic": "T", "AccessKey": "ak", "queueId": "3"}, b"hello")
    out = subprocess.run(
        ["openssl", "dgst", "-sha1", "-hmac", "s3cret", "-binary"],
        input=content,
        capture_output=True,
        check=True,
    ).stdout
    assert cal_signature(content, "s3cret") == base64.b64encode(out).decode()


@pytest.mark.parametrize(
    ("pattern", "ip", "ok"),
    [
        ("*", "10.1.2.3", True),
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "127.0.0.2", False),
        ("192.168.*", "192.168.4.5", True),
        ("192.168.*.*", "192.169.4.5", False),
        ("192.168.1.1-5", "192.168.1.5", True),
        ("192.168.1.1-5", "192.168.1.6", False),
        ("192.168.1.{1,7}", "192.168.1.7", True),
        ("192.168.1.{1,7}", "192.168.1.2", False),
        ("", "127.0.0.1", False),
    ],
)
def test_address_patterns(pattern: str, ip: str, ok: bool) -> None:
    assert AddressPattern.parse(pattern).matches(ip) is ok


@pytest.mark.parametrize("bad", ["300.1.1.1", "1.2.3", "a.b.c.d", "1.2.3.9-4"])
def test_bad_address_pattern_is_an_error(bad: str) -> None:
    with pytest.raises(ValueError, match="white remote address"):
        AddressPattern.parse(bad)


def test_permission_bits_as_upstream() -> None:
    assert perm.parse_perm("PUB|SUB") == perm.PUB | perm.SUB
    assert perm.parse_perm("nonsense") == perm.DENY
    assert perm.check_permission(perm.PUB, perm.PUB | perm.SUB)
    assert not perm.check_permission(perm.SUB, perm.PUB)
    assert not perm.check_permission(perm.PUB, perm.PUB | perm.DENY)
    assert perm.check_permission(perm.ANY, perm.SUB)
    assert perm.UPSTREAM_ADMIN_CODES <= perm.ADMIN_CODES
    assert perm.needs_admin(RequestCode.UPDATE_BROKER_CONFIG)
    assert perm.needs_admin(RequestCode.WIPE_WRITE_PERM_OF_BROKER)
    assert not perm.needs_admin(RequestCode.SEND_MESSAGE_V2)


def test_resources_per_code() -> None:
    def need(code: int, ext: dict[str, str], body: bytes | None = None) -> list[tuple[str, int]]:
        return needed_permissions(RemotingCommand.request(code, ext, body))

    assert need(RequestCode.SEND_MESSAGE, {"topic": "T", "producerGroup": "P"}) == [("T", perm.PUB)]
    assert need(RequestCode.SEND_MESSAGE_V2, {"a": "P", "b": "T"}) == [("T", perm.PUB)]
    assert need(RequestCode.SEND_BATCH_MESSAGE, {"a": "P", "b": "T"}) == [("T", perm.PUB)]
    # a send to a retry topic is the group's send-back: SUB on the group
    assert need(RequestCode.SEND_MESSAGE_V2, {"a": "G", "b": "%RETRY%G"}) == [
        ("%RETRY%G", perm.SUB)
    ]
    assert need(RequestCode.PULL_MESSAGE, {"topic": "T", "consumerGroup": "G"}) == [
        ("T", perm.SUB),
        ("%RETRY%G", perm.SUB),
    ]
    assert need(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "G", "originTopic": "T"}) == [
        ("%RETRY%G", perm.SUB),
        ("T", perm.PUB),
    ]
    assert need(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "T"}) == [
        ("%RETRY%G", perm.SUB),
        ("T", perm.SUB),
    ]
    assert need(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"}) == [
        ("%RETRY%G", perm.SUB)
    ]
    heartbeat = orjson.dumps(
        {
            "clientID": "c",
            "consumerDataSet": [
                {"groupName": "G", "subscriptionDataSet": [{"topic": "T1"}, {"topic": "T2"}]}
            ],
        }
    )
    assert need(RequestCode.HEART_BEAT, {}, heartbeat) == [
        ("%RETRY%G", perm.SUB),
        ("T1", perm.SUB),
        ("T2", perm.SUB),
    ]
    assert need(RequestCode.HEART_BEAT, {}, b"not json") == []
    assert need(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}) == []


def test_decision_order_and_remarks() -> None:
    t = table()
    ok = signed(RequestCode.SEND_MESSAGE_V2, {"a": "P", "b": "allowed"}, b"x")
    assert decide(t, "127.0.0.1", ok) is None
    # the global white list admits without any signature
    assert decide(t, "127.0.0.2", RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG)) is None

    unsigned = decide(
        t, "127.0.0.1", RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"b": "allowed"})
    )
    assert unsigned is not None and unsigned.reason == REASON_NO_ACCESS_KEY
    assert "127.0.0.1" in unsigned.remark and "globalWhiteRemoteAddresses" in unsigned.remark

    unknown = decide(
        t, "127.0.0.1", signed(RequestCode.SEND_MESSAGE_V2, {"b": "allowed"}, ak="nobody00")
    )
    assert unknown is not None and unknown.reason == REASON_UNKNOWN_ACCESS_KEY
    assert "nobody00" in unknown.remark

    wrong = decide(
        t, "127.0.0.1", signed(RequestCode.SEND_MESSAGE_V2, {"b": "allowed"}, sk="wrong0000")
    )
    assert wrong is not None and wrong.reason == REASON_BAD_SIGNATURE
    # upstream 5.4.0's remarks, word for word (tests/interop/test_java_security.py compares them)
    assert wrong.remark == "check signature failed."

    tampered = signed(RequestCode.SEND_MESSAGE_V2, {"a": "P", "b": "allowed"}, b"x")
    tampered.ext_fields["b"] = "subOnly"
    bad = decide(t, "127.0.0.1", tampered)
    assert bad is not None and bad.reason == REASON_BAD_SIGNATURE

    no_pub = decide(t, "127.0.0.1", signed(RequestCode.SEND_MESSAGE_V2, {"a": "P", "b": "subOnly"}))
    assert no_pub is not None and no_pub.reason == REASON_NO_TOPIC_PERM
    assert no_pub.remark == (
        f"User:{APP_AK} has no permission to access Topic:subOnly from 127.0.0.1, "
        "no matched policies."
    )

    default_deny = decide(
        t, "127.0.0.1", signed(RequestCode.SEND_MESSAGE_V2, {"a": "P", "b": "other"})
    )
    assert default_deny is not None and default_deny.reason == REASON_NO_TOPIC_PERM

    no_group = decide(
        t,
        "127.0.0.1",
        signed(RequestCode.PULL_MESSAGE, {"topic": "allowed", "consumerGroup": "deniedGroup"}),
    )
    assert no_group is not None and no_group.reason == REASON_NO_GROUP_PERM
    assert no_group.remark == (
        f"User:{APP_AK} has no permission to access Group:deniedGroup from 127.0.0.1, "
        "the decision is deny."
    )
    # an unlisted group falls back to defaultGroupPerm (SUB)
    assert (
        decide(
            t,
            "127.0.0.1",
            signed(RequestCode.PULL_MESSAGE, {"topic": "allowed", "consumerGroup": "g"}),
        )
        is None
    )

    admin = decide(t, "127.0.0.1", signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "X"}))
    assert admin is not None and admin.reason == REASON_NOT_ADMIN
    assert str(int(RequestCode.UPDATE_AND_CREATE_TOPIC)) in admin.remark
    assert (
        decide(
            t,
            "127.0.0.1",
            signed(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "X"}, ak=ADMIN_AK, sk=ADMIN_SK),
        )
        is None
    )
    # an admin without resource lists may use any topic (upstream)
    assert (
        decide(
            t,
            "127.0.0.1",
            signed(RequestCode.SEND_MESSAGE_V2, {"b": "any"}, ak=ADMIN_AK, sk=ADMIN_SK),
        )
        is None
    )


def test_account_white_address_admits_without_signature() -> None:
    text = PLAIN_ACL.replace("whiteRemoteAddress:\n", "whiteRemoteAddress: 127.0.0.9\n", 1)
    t = build_table([(None, parse_acl_text(text))])
    unsigned_with_key = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, {"b": "x", "AccessKey": APP_AK}
    )
    assert decide(t, "127.0.0.9", unsigned_with_key) is None
    assert decide(t, "127.0.0.1", unsigned_with_key) is not None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("accounts: [{accessKey: short, secretKey: 12345678}]", "accessKey"),
        ("accounts: [{accessKey: longenough, secretKey: 12345678, topicPerms: [a=ALL]}]", "ALL"),
        (
            "accounts: [{accessKey: longenough, secretKey: 12345678, topicPerms: [noequals]}]",
            "resource=PERM",
        ),
        ("globalWhiteRemoteAddresses: [999.1.1.1]", "999.1.1.1"),
        ("accounts: [", "not valid YAML"),
        ("- just a list", "mapping"),
    ],
)
def test_bad_files_name_the_problem(text: str, needle: str) -> None:
    with pytest.raises(AclConfigError, match=r"plain_acl\.yml") as info:
        parse_acl_text(text)
    assert needle in str(info.value)


def test_numeric_secret_key_is_text() -> None:
    parsed = parse_acl_text("accounts: [{accessKey: RocketMQ, secretKey: 12345678}]")
    assert parsed.accounts[0].secret_key == "12345678"


def test_files_found_where_upstream_looks(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "acl").mkdir(parents=True)
    (conf / "plain_acl.yml").write_text(PLAIN_ACL)
    (conf / "acl" / "team.yml").write_text(
        "accounts: [{accessKey: teamKey01, secretKey: 12345678}]"
    )
    (conf / "acl" / "notes.txt").write_text("ignored")
    files = acl_files(tmp_path, None)
    assert files == [conf / "plain_acl.yml", conf / "acl" / "team.yml"]
    assert acl_files(tmp_path, conf / "acl") == [conf / "acl" / "team.yml"]
    # the same AccessKey in two files is refused, naming both
    (conf / "acl" / "dup.yml").write_text(
        f"accounts: [{{accessKey: {APP_AK}, secretKey: 12345678}}]"
    )
    from ferrymq.acl.plain_config import load_table

    with pytest.raises(AclConfigError, match=r"dup\.yml"):
        load_table(acl_files(tmp_path, None))
    with pytest.raises(AclConfigError, match="no ACL file"):
        load_table([])
