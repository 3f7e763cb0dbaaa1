"""Helpers of the security tests: certificates (ferrymq.remoting.certs: a CA, server and client
certificates signed by it), ACL files, and a deadline poll."""

from __future__ import annotations

import functools
from pathlib import Path

import polling
from ferrymq.remoting.certs import CertFiles
from ferrymq.remoting.certs import make_ca as make_ca
from ferrymq.remoting.certs import make_cert as _make_cert


def make_cert(
    directory: Path, ca: CertFiles, name: str, *, days: int = 10, server: bool = True
) -> CertFiles:
    """A server (localhost/127.0.0.1) or client certificate valid ``days`` days."""
    return _make_cert(
        directory, ca, name, days=days, hosts=("localhost", "127.0.0.1") if server else ()
    )


ADMIN_AK = "adminKey01"
ADMIN_SK = "adminSecret01"
APP_AK = "appKey0001"
APP_SK = "appSecret001"

PLAIN_ACL = f"""\
globalWhiteRemoteAddresses:
  - 127.0.0.2

accounts:
  - accessKey: {APP_AK}
    secretKey: {APP_SK}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - allowed=PUB|SUB
      - pubOnly=PUB
      - subOnly=SUB
    groupPerms:
      - deniedGroup=DENY
  - accessKey: {ADMIN_AK}
    secretKey: {ADMIN_SK}
    admin: true
"""


# ACL reloads and TLS handshakes are watched at the 50 ms step this suite was written with
wait_for = functools.partial(polling.wait_for, every=0.05)
