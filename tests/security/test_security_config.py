"""Where the security settings come from: broker.conf keys (not reported as unknown),
ROCKETMQ_HOME for upstream's ACL file places, and the client's FERRYMQ_* variables."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from ferrymq.acl.settings import AclSettings, load_acl_settings
from ferrymq.broker.broker_conf import load_broker_conf
from ferrymq.client.credentials import ClientSecurity
from ferrymq.remoting.tls import TlsSettings
from security_helpers import PLAIN_ACL


def test_security_keys_are_not_reported_unknown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "aclEnable=true\naclFilePath=/x\ntls.server.mode=disabled\ntls.ha.enable=false\n"
        "haSendHeartbeatInterval=5000\nbogusKey=1\n"
    )
    with caplog.at_level(logging.WARNING):
        load_broker_conf(conf, env={})
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "bogusKey" in warnings
    for key in ("aclEnable", "aclFilePath", "tls.server.mode", "haSendHeartbeatInterval"):
        assert key not in warnings


def test_acl_files_from_rocketmq_home(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    conf = tmp_path / "broker.conf"
    conf.write_text("aclEnable=true\n")
    settings = load_acl_settings(conf, env={"ROCKETMQ_HOME": str(tmp_path)})
    assert settings.acl_enable
    assert settings.files() == [tmp_path / "conf" / "plain_acl.yml"]
    # the conf file's own key wins over the variable
    conf.write_text(f"aclEnable=true\nrocketmqHome={tmp_path / 'other'}\n")
    assert load_acl_settings(conf, env={"ROCKETMQ_HOME": str(tmp_path)}).files() == []
    conf.write_text("aclEnable=maybe\n")
    with pytest.raises(ValueError, match="aclEnable"):
        load_acl_settings(conf, env={})


def test_client_security_from_environment(tmp_path: Path) -> None:
    assert ClientSecurity.from_env({}) == ClientSecurity()
    sec = ClientSecurity.from_env(
        {
            "FERRYMQ_ACCESS_KEY": "ak123456",
            "FERRYMQ_SECRET_KEY": "sk123456",
            "FERRYMQ_TLS_ENABLE": "true",
            "FERRYMQ_TLS_TRUST_CERT_PATH": str(tmp_path / "ca.crt"),
        }
    )
    assert sec.credentials is not None and sec.credentials.access_key == "ak123456"
    assert "sk123456" not in repr(sec)
    assert sec.tls is not None and sec.tls.auth_server
    assert sec.rpc_hook() is not None
    # upstream's TLS_ENABLE works too; a lone key is an error naming the missing variable
    assert ClientSecurity.from_env({"TLS_ENABLE": "true"}).tls is not None
    with pytest.raises(ValueError, match="FERRYMQ_SECRET_KEY"):
        ClientSecurity.from_env({"FERRYMQ_ACCESS_KEY": "ak123456"})


def test_namesrv_security_keys_are_not_reported_unknown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ferrymq.namesrv.config import load_namesrv_config

    conf = tmp_path / "namesrv.conf"
    conf.write_text("listenPort=9877\naclEnable=true\ntls.server.mode=disabled\nbogusKey=1\n")
    with caplog.at_level(logging.WARNING):
        cfg = load_namesrv_config(conf, env={}, also_read_by=(AclSettings, TlsSettings))
    assert cfg.listen_port == 9877
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "bogusKey" in warnings
    assert "aclEnable" not in warnings and "tls.server.mode" not in warnings
