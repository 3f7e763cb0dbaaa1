"""RemotingCommand: one request or response of the remoting protocol (upstream RemotingCommand).

Header fields are ``code, language, version, opaque, flag, remark, extFields``. Two header encodings
exist upstream: JSON (serializeType 0, what every client uses by default) and the compact binary
"ROCKETMQ" form (serializeType 1); a response is encoded the way its request was.

Inbound leniency (PROTOCOL.md): extFields values may be strings, numbers or booleans, language a name
or a number. Outbound strictness: every extFields value is written as a JSON string, because clients
that parse strings silently ignore numbers.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ferrymq.remoting.codes import LanguageCode, ResponseCode, language_name

RESPONSE_FLAG = 0b01
ONEWAY_FLAG = 0b10
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
# upstream MQVersion of Apache RocketMQ 5.4.0, the oracle (its MQVersion.CURRENT_VERSION: ordinal
# 493 of rocketmq-common 5.4.0's MQVersion.Version). Every command carries it, so clients see it as
# the broker's version (mqadmin, rocketmq-dashboard) and brokers as this client's. Upstream gates
# on it: Apache's NameServer answers standard JSON routes from V4_9_4 on; a 5.x server shutting
# down answers GO_AWAY past V5_3_1; Java clients check only < V4_1_0_SNAPSHOT (PullAPIWrapper)
DEFAULT_VERSION = 493
DEFAULT_VERSION_DESC = "V5_4_0"  # MQVersion.getVersionDesc(DEFAULT_VERSION)

Buffer = bytes | bytearray | memoryview

_INT = struct.Struct(">i")
_MARK = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_SHORT = struct.Struct(">h")

_opaque_counter = itertools.count(1)
_LANGUAGE_NAMES = frozenset(code.name for code in LanguageCode)


class CommandDecodeError(ValueError):
    """A frame whose header cannot be parsed; the caller answers or closes the connection."""


def next_opaque() -> int:
    """A fresh request id. Ids only need to be unique per connection; one counter keeps them so."""
    return next(_opaque_counter) & 0x7FFFFFFF


def _ext_str(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return str(value)


def _ext_fields(ext_fields: Mapping[str, object] | None) -> dict[str, str]:
    """extFields as strings, None values dropped; strings (nearly every value) pass unconverted."""
    if not ext_fields:
        return {}
    return {k: v if type(v) is str else _ext_str(v) for k, v in ext_fields.items() if v is not None}


@dataclass(slots=True)
class RemotingCommand:
    code: int
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: Buffer | Sequence[Buffer] | None = None
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    language: str = LanguageCode.PYTHON.name
    version: int = DEFAULT_VERSION
    serialize_type: int = SERIALIZE_JSON

    # --- construction ---------------------------------------------------------------------
    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: Mapping[str, object] | None = None,
        body: Buffer | Sequence[Buffer] | None = None,
        *,
        oneway: bool = False,
    ) -> RemotingCommand:
        fields = _ext_fields(ext_fields)
        return cls(
            code=int(code),
            ext_fields=fields,
            body=body,
            opaque=next_opaque(),
            flag=ONEWAY_FLAG if oneway else 0,
        )

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: Mapping[str, object] | None = None,
        body: Buffer | Sequence[Buffer] | None = None,
    ) -> RemotingCommand:
        """The response to this request: same opaque, response flag set, same header encoding."""
        fields = _ext_fields(ext_fields)
        return RemotingCommand(
            code=int(code),
            ext_fields=fields,
            body=body,
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            serialize_type=self.serialize_type,
        )

    # --- flags ----------------------------------------------------------------------------
    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    # --- body helpers ---------------------------------------------------------------------
    def body_bytes(self) -> bytes:
        body = self.body
        if body is None:
            return b""
        if isinstance(body, bytes):
            return body
        if isinstance(body, (bytearray, memoryview)):
            return bytes(body)
        return b"".join(bytes(part) for part in body)

    def body_json(self) -> Any:
        """The body parsed as (fastjson-flavoured) JSON; None when empty."""
        from ferrymq.remoting.fastjson import loads

        raw = self.body_bytes()
        return loads(raw) if raw else None

    def ext_int(self, name: str, default: int | None = None) -> int:
        """An extFields value as int; a missing or malformed one raises ValueError naming the field."""
        raw = self.ext_fields.get(name)
        if raw is None or raw == "":
            if default is None:
                raise ValueError(f"missing header field '{name}'")
            return default
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"header field '{name}' is not an integer: {raw!r}") from None

    def ext_bool(self, name: str, default: bool = False) -> bool:
        raw = self.ext_fields.get(name)
        if raw is None or raw == "":
            return default
        return raw.lower() in ("true", "1")

    # --- encoding -------------------------------------------------------------------------
    def encode_header(self) -> bytes:
        if self.serialize_type == SERIALIZE_ROCKETMQ:
            return self._encode_binary_header()
        header: dict[str, Any] = {
            "code": self.code,
            "extFields": self.ext_fields,
            "flag": self.flag,
            "language": self.language,
            "opaque": self.opaque,
            "serializeTypeCurrentRPC": "JSON",
            "version": self.version,
        }
        if self.remark is not None:
            header["remark"] = self.remark
        return orjson.dumps(header)

    def _encode_binary_header(self) -> bytes:
        try:
            lang = LanguageCode[self.language].value
        except KeyError:
            lang = LanguageCode.OTHER.value
        parts = [_BIN_FIXED.pack(self.code, lang, self.version, self.opaque, self.flag)]
        remark = self.remark.encode() if self.remark else b""
        parts.append(_INT.pack(len(remark)) + remark)
        ext = bytearray()
        for key, value in self.ext_fields.items():
            k = key.encode()
            v = value.encode()
            ext += _SHORT.pack(len(k)) + k + _INT.pack(len(v)) + v
        parts.append(_INT.pack(len(ext)) + bytes(ext))
        return b"".join(parts)

    def encode(self) -> list[Buffer]:
        """The whole frame as a list of buffers for ``transport.writelines`` (body parts not copied)."""
        header = self.encode_header()
        body = self.body
        mark = (self.serialize_type << 24) | len(header)
        if body is None:
            return [_MARK.pack(4 + len(header), mark) + header]
        if isinstance(body, (bytes, bytearray, memoryview)):
            return [_MARK.pack(4 + len(header) + len(body), mark) + header, body]
        total = 4 + len(header) + sum(len(p) for p in body)
        out: list[Buffer] = [_MARK.pack(total, mark) + header]
        out.extend(body)
        return out

    def to_bytes(self) -> bytes:
        return b"".join(bytes(p) for p in self.encode())


def decode_command(frame: bytes) -> RemotingCommand:
    """Parse one frame (without its length prefix). Raises CommandDecodeError on a bad header."""
    if len(frame) < 4:
        raise CommandDecodeError("frame shorter than its header mark")
    (mark,) = _INT.unpack_from(frame, 0)
    serialize_type = (mark >> 24) & 0xFF
    header_len = mark & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise CommandDecodeError(
            f"header length {header_len} exceeds frame ({len(frame) - 4} bytes)"
        )
    end = 4 + header_len
    body = frame[end:] if end < len(frame) else None
    if serialize_type == SERIALIZE_JSON:
        return _decode_json_header(frame[4:end], body)
    if serialize_type == SERIALIZE_ROCKETMQ:
        cmd = _decode_binary_header(frame[4:end])
        cmd.body = body
        cmd.serialize_type = serialize_type
        return cmd
    raise CommandDecodeError(f"unknown serialize type {serialize_type}")


def _decode_json_header(header: bytes, body: bytes | None = None) -> RemotingCommand:
    try:
        obj = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise CommandDecodeError(f"header is not JSON: {exc}") from None
    if type(obj) is not dict:
        raise CommandDecodeError("header is not a JSON object")
    get = obj.get
    # the usual ints as they are; anything else through int() (which rejects what it must)
    try:
        code = obj["code"]
        if type(code) is not int:
            code = int(code)
        opaque = get("opaque", 0)
        if type(opaque) is not int:
            opaque = int(opaque)
        flag = get("flag", 0)
        if type(flag) is not int:
            flag = int(flag)
        version = get("version", 0)
        if type(version) is not int:
            version = int(version or 0)
    except (KeyError, TypeError, ValueError):
        raise CommandDecodeError("header code/opaque/flag/version are not integers") from None
    ext_raw = get("extFields") or {}
    if type(ext_raw) is not dict:
        raise CommandDecodeError("header extFields is not an object")
    ext: dict[str, str] = ext_raw  # orjson keys are str; the usual all-string values are kept
    for value in ext_raw.values():
        if type(value) is not str:
            ext = {str(k): _ext_str(v) for k, v in ext_raw.items() if v is not None}
            break
    remark = get("remark")
    language = get("language")
    return RemotingCommand(
        code,
        ext,
        body,
        opaque,
        flag,
        remark if type(remark) is str else None,
        # the usual upper-case name as is; numbers and odd spellings normalised
        language
        if type(language) is str and language in _LANGUAGE_NAMES
        else language_name(language),
        version,
    )


def _decode_binary_header(header: bytes) -> RemotingCommand:
    try:
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
        pos = _BIN_FIXED.size
        (remark_len,) = _INT.unpack_from(header, pos)
        pos += 4
        if remark_len < 0 or pos + remark_len > len(header):
            raise CommandDecodeError("binary header: bad remark length")
        remark = header[pos : pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _INT.unpack_from(header, pos)
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end > len(header):
            raise CommandDecodeError("binary header: bad extFields length")
        ext: dict[str, str] = {}
        while pos < end:
            (klen,) = _SHORT.unpack_from(header, pos)
            pos += 2
            key = header[pos : pos + klen].decode()
            pos += klen
            (vlen,) = _INT.unpack_from(header, pos)
            pos += 4
            if klen < 0 or vlen < 0 or pos + vlen > end:
                raise CommandDecodeError("binary header: bad extFields entry")
            ext[key] = header[pos : pos + vlen].decode()
            pos += vlen
    except (struct.error, UnicodeDecodeError) as exc:
        raise CommandDecodeError(f"binary header malformed: {exc}") from None
    return RemotingCommand(
        code=code,
        ext_fields=ext,
        opaque=opaque,
        flag=flag,
        remark=remark,
        language=language_name(lang),
        version=version,
    )
