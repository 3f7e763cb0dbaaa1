"""The Java client (rocketmq-client 4.9.8 and 5.4.0) with ACL-signed requests against Apache
RocketMQ 5.4.0 and ferrymq, each configured from one plain_acl.yml: what the user sees must be
equal (tests/interop/README.md).

Apache 5.4.0 has no ACL 1.0 any more (RIP-77): its ACL 2.0 (authenticationEnabled,
authorizationEnabled) takes the accounts of a 1.0 ``plain_acl.yml`` at start
(migrateAuthFromV1Enabled) and checks the same AclClientRPCHook signature; ferrymq reads the file
as upstream 4.x did (aclEnable, aclFilePath). The clusters are this module's own: started once,
stopped at its end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ferrymq.client.credentials import ClientSecurity, SessionCredentials

from .differential import PERM_RW, differential
from .java_runner import JavaScenarios
from .reference import ApacheCluster, Target, ferrymq_cluster
from .test_java_scenarios import names

pytestmark = pytest.mark.timeout(900)

USER, USER_SECRET = "interopUser", "interopSecret1"
ADMIN, ADMIN_SECRET = "interopAdmin", "interopAdmin1"
DENIED = "AclDenied"

# one account file for both: the user may publish and subscribe everywhere but DENIED (per client
# version, see names()); the admin account creates the topics
PLAIN_ACL = f"""\
accounts:
  - accessKey: {USER}
    secretKey: {USER_SECRET}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms:
      - {DENIED}_498=DENY
      - {DENIED}_540=DENY
  - accessKey: {ADMIN}
    secretKey: {ADMIN_SECRET}
    admin: true
"""

# Apache 5.4.0: ACL 2.0 with the local (RocksDB) metadata stores, filled from plain_acl.yml
APACHE_ACL_CONF = {
    "authenticationEnabled": "true",
    "authenticationMetadataProvider": (
        "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider"
    ),
    "authorizationEnabled": "true",
    "authorizationMetadataProvider": (
        "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider"
    ),
    "migrateAuthFromV1Enabled": "true",
}

ADMIN_SECURITY = ClientSecurity(SessionCredentials(ADMIN, ADMIN_SECRET))


@pytest.fixture(scope="module")
def acl_targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Target]]:
    """Apache and ferrymq with ACL on, the oracle first."""
    ferry_dir = tmp_path_factory.mktemp("ferrymq-acl")
    acl_file = ferry_dir / "plain_acl.yml"
    acl_file.write_text(PLAIN_ACL)
    ferry_conf = {"aclEnable": "true", "aclFilePath": str(acl_file)}
    with (
        ApacheCluster(
            tmp_path_factory.mktemp("apache-acl"),
            broker_conf=APACHE_ACL_CONF,
            home_files={"conf/plain_acl.yml": PLAIN_ACL},
        ) as apache,
        ferrymq_cluster(Path(ferry_dir), broker_conf=ferry_conf) as ferry,
    ):
        yield [
            Target("apache", apache, security=ADMIN_SECURITY),
            Target("ferrymq", ferry, security=ADMIN_SECURITY),
        ]


def test_signed_send_consume_wrong_secret_denied_topic(
    module_java_client: JavaScenarios, acl_targets: list[Target]
) -> None:
    """An allowed send and its consumption work; a wrong secret and a denied topic get the same
    code and remark."""
    topic = names(module_java_client, "AclAllowed")
    denied = names(module_java_client, DENIED)

    def check(obs: dict[str, Any]) -> None:
        assert obs["allowedSend"]["status"] == "SEND_OK", obs
        assert obs["consumed"] == ["acl-ok"]
        assert obs["wrongSecret"]["code"] == 16, obs  # NO_PERMISSION
        assert obs["deniedTopic"]["code"] == 16, obs

    differential(
        module_java_client,
        acl_targets,
        "acl",
        topics={topic: (2, PERM_RW), denied: (2, PERM_RW)},
        topic=topic,
        denied_topic=denied,
        group=names(module_java_client, "CG_acl"),
        access_key=USER,
        secret_key=USER_SECRET,
        check=check,
    )
