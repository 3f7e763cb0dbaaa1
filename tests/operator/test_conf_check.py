"""Generated configuration files checked with ferrymq's own config models."""

from __future__ import annotations

from ferrymq_operator import conf_check
from ferrymq_operator.builders import broker, names, namesrv
from ferrymq_operator.builders.names import Owner
from ferrymq_operator.models import parse_broker_spec, parse_nameserver_spec

OWNER = Owner("ferrymq.io/v1alpha1", "Broker", "orders", "prod", "uid")
ADDR = names.namesrv_addresses("routes", "prod", 2, "cluster.local")


def broker_report(config: dict[str, str], **spec: object) -> conf_check.ConfReport:
    parsed = parse_broker_spec({"nameServerRef": {"name": "routes"}, "config": config, **spec})
    conf = broker.broker_conf(OWNER, parsed, ADDR, group=0, broker_id=0)
    return conf_check.check_broker(conf, list(config))


def test_generated_broker_conf_is_accepted_by_the_broker_models() -> None:
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            report = broker_report({}, brokerRole=role, flushDiskType=flush)
            assert report == conf_check.ConfReport(problems=[], unknown=[])


def test_every_slave_conf_is_accepted() -> None:
    parsed = parse_broker_spec({"nameServerRef": {"name": "routes"}, "replicasPerGroup": 3})
    for broker_id in range(3):
        conf = broker.broker_conf(OWNER, parsed, ADDR, group=1, broker_id=broker_id)
        assert conf_check.check_broker(conf, []).problems == []


def test_bad_value_is_named_with_its_source() -> None:
    report = broker_report({"fileReservedTime": "two days"})
    (problem,) = report.problems
    assert "fileReservedTime='two days'" in problem and "spec.config" in problem


def test_valid_extra_keys() -> None:
    report = broker_report(
        {"fileReservedTime": "48", "deleteWhen": "04", "autoCreateTopicEnable": "false"}
    )
    assert report.problems == [] and report.unknown == []


def test_unknown_key_is_reported_not_refused() -> None:
    report = broker_report({"fileReserveTime": "48"})
    assert report.problems == []
    assert report.unknown == ["fileReserveTime"]


def test_namesrv_conf() -> None:
    good = parse_nameserver_spec({"config": {"scanNotActiveBrokerInterval": "5000"}})
    assert conf_check.check_namesrv(namesrv.namesrv_conf(good), list(good.config)).problems == []
    bad = parse_nameserver_spec({"config": {"scanNotActiveBrokerInterval": "1"}})
    (problem,) = conf_check.check_namesrv(namesrv.namesrv_conf(bad), list(bad.config)).problems
    assert "scanNotActiveBrokerInterval" in problem


def test_keys_of_every_broker_conf_part_are_known_and_checked() -> None:
    """Semantics and lag keys are read by the broker too (BrokerConf parts): not unknown."""
    ok = broker_report({"transactionTimeOut": "1500", "consumerLagSampleInterval": "2000"})
    assert ok == conf_check.ConfReport(problems=[], unknown=[])
    bad = broker_report({"transactionCheckMax": "0", "consumerLagEnable": "perhaps"})
    assert bad.unknown == []
    assert len(bad.problems) == 2
    assert any(p.startswith("transactionCheckMax='0'") for p in bad.problems), bad.problems
    assert any(p.startswith("consumerLagEnable='perhaps'") for p in bad.problems), bad.problems


def test_generated_acl_and_tls_keys_pass_their_parts() -> None:
    for need in ("none", "optional", "require"):
        report = broker_report({}, acl={}, tls={"mode": "enforcing", "needClientAuth": need})
        assert report == conf_check.ConfReport(problems=[], unknown=[])
