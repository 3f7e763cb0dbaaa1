"""Request signatures as upstream computes them (``AclUtils.combineRequestContent``/``calSignature``).

The signed content is the values of the request's extFields, sorted by key, except ``Signature``
(and ``_UNIQUE_KEY_QUERY``, which upstream leaves out), concatenated as UTF-8, followed by the
body; the signature is base64(HMAC-SHA1(secretKey, content)). Clients add ``AccessKey`` (and
``SecurityToken``) before signing, so both are covered.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"

_UNSIGNED = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})


def combine_content(ext_fields: Mapping[str, str], body: bytes | None) -> bytes:
    """The bytes upstream signs: sorted extFields values (no Signature) then the body."""
    # Java's TreeMap orders keys by UTF-16 code units; for the ASCII keys of the protocol that is
    # Python's code-point order
    text = "".join(ext_fields[k] for k in sorted(ext_fields) if k not in _UNSIGNED)
    data = text.encode("utf-8")
    return data + body if body else data


def cal_signature(content: bytes, secret_key: str) -> str:
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def verify(content: bytes, secret_key: str, signature: str | None) -> bool:
    if not signature:
        return False
    return hmac.compare_digest(cal_signature(content, secret_key), signature)


def sign_fields(
    ext_fields: dict[str, str],
    body: bytes | None,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
) -> None:
    """Add AccessKey, (SecurityToken,) Signature to ``ext_fields`` in place (upstream AclClientRPCHook)."""
    ext_fields.pop(SIGNATURE, None)
    ext_fields[ACCESS_KEY] = access_key
    if security_token:
        ext_fields[SECURITY_TOKEN] = security_token
    ext_fields[SIGNATURE] = cal_signature(combine_content(ext_fields, body), secret_key)
