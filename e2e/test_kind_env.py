"""The e2e suite's own guards (run without a cluster): which contexts it agrees to touch."""

from __future__ import annotations

import pytest

from e2e.kind_env import Refused, check_context, is_test_context, missing_tools


@pytest.mark.parametrize("name", ["kind-ferrymq-e2e", "ci-east", "team-test-cluster", "E2E"])
def test_test_contexts_are_accepted(name: str) -> None:
    assert is_test_context(name)
    check_context(name)


@pytest.mark.parametrize("name", ["prod-eu-1", "arn:aws:eks:eu-west-1:1:cluster/payments", ""])
def test_other_contexts_are_refused_with_the_reason(name: str) -> None:
    with pytest.raises(Refused, match="refusing to run the e2e suite"):
        check_context(name)


def test_missing_tools_are_named() -> None:
    assert missing_tools(["sh", "no-such-tool-ferrymq"]) == ["no-such-tool-ferrymq"]


def test_the_real_node_custom_resources_are_valid_specs() -> None:
    """The real-cluster suite's CRs (pod network here; the hostNetwork contract's fields on the
    k8s-node.sh node) must parse with the operator's models."""
    from ferrymq_operator import models

    from e2e.test_real_node import broker_cr, nameserver_cr

    if "host_network" not in models.BrokerSpec.model_fields:
        pytest.skip("the operator's models have no hostNetwork yet (contract-hostnetwork.md)")
    models.parse_nameserver_spec(nameserver_cr("ferrymq/ferrymq:0.1.0")["spec"])
    models.parse_broker_spec(broker_cr("ferrymq/ferrymq:0.1.0")["spec"])


def test_the_suite_knows_whether_it_runs_in_a_netns() -> None:
    from e2e.kind_env import inside_netns

    assert inside_netns("no-such-netns-ferrymq") is False
