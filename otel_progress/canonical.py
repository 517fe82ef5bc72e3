"""Canonical forms and digests of tool arguments, results and errors.

Everything the engine compares goes through this module, so that two values that mean
the same thing produce one digest: JSON arriving as a string or as a map, keys in any
order, insignificant whitespace, volatile envelope fields (timestamps, request ids,
ETags, latencies) that change on every reply.

Digests are 64-bit integers taken from BLAKE3, keyed when a digest key is configured
(``OTEL_PROGRESS_DIGEST_KEY``), so that a digest exported to a tracing backend cannot be
reversed by hashing guesses of a low-entropy argument.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import blake3

__all__ = [
    "DEFAULT_VOLATILE_KEYS",
    "Digester",
    "canonical_json",
    "error_signature_text",
    "normalise_action",
    "parse_json_value",
    "strip_volatile",
]

#: Keys removed from results before digesting, compared case-insensitively with ``-``
#: and ``_`` ignored. They change on every reply without the reply meaning anything new.
DEFAULT_VOLATILE_KEYS: frozenset[str] = frozenset(
    {
        "timestamp", "ts", "time", "date", "datetime", "now",
        "servedat", "createdat", "updatedat", "fetchedat", "generatedat", "receivedat",
        "requestid", "requestuuid", "traceid", "spanid", "correlationid", "xrequestid",
        "etag", "latency", "latencyms", "durationms", "elapsedms", "tookms", "took",
        "duration", "elapsed", "responsetime", "servertime", "expiresat", "nonce",
    }
)

_MAX_DEPTH = 64
_MAX_STRING_PARSE = 4 * 1024 * 1024  # JSON strings above this are digested as text
_WS = re.compile(r"\s+")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEXID = re.compile(r"\b(?:0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b|\b[0-9a-fA-F]{12,}\b")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.\-]+){2,}[\\/]?")
_DIGITS = re.compile(r"\d+")
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
)
_ID_KEY = re.compile(r"(?:^|[_\-.])(?:id|ids|uuid|guid)$|Id$|ID$")


def _norm_key(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def parse_json_value(value: Any) -> Any:
    """Return ``value`` with a JSON document in a string decoded, else unchanged.

    Only strings that look like a JSON object or array are decoded, so that a plain
    text result such as ``"3 tickets"`` stays text. Decoding errors keep the string.
    """
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str) and value and len(value) <= _MAX_STRING_PARSE:
        stripped = value.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                return json.loads(value)
            except (ValueError, RecursionError):
                return value
    return value


def _plain(value: Any, depth: int, volatile: frozenset[str] | None) -> Any:
    """Convert to plain JSON-compatible data: sorted-key dicts, lists, finite numbers."""
    if depth > _MAX_DEPTH:
        return "<deep>"
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return int(value) if value.is_integer() and abs(value) < 2**53 else value
        return repr(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            ks = k if isinstance(k, str) else str(k)
            if volatile is not None and _norm_key(ks) in volatile:
                continue
            out[ks] = _plain(v, depth + 1, volatile)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1, volatile) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v, depth + 1, volatile) for v in value), key=repr)
    return str(value)


def strip_volatile(value: Any, volatile: Iterable[str] = DEFAULT_VOLATILE_KEYS) -> Any:
    """Return ``value`` (parsed if it is a JSON string) without volatile keys, at any depth."""
    keys = frozenset(_norm_key(k) for k in volatile)
    return _plain(parse_json_value(value), 0, keys)


def canonical_json(value: Any, volatile: frozenset[str] | None = None) -> str:
    """The canonical text of a value: JSON with sorted keys and fixed separators.

    ``value`` may be a map, a list, a scalar or a string holding JSON. ``volatile`` holds
    already-normalised key names (see :class:`Digester`) to drop at any depth.
    """
    plain = _plain(parse_json_value(value), 0, volatile)
    try:
        return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):  # pragma: no cover - _plain output is JSON-safe
        return repr(plain)


def normalise_action(name: str, arguments: Any) -> str:
    """The decision-relevant form of a call, for state signatures (seed 003).

    Lower-cased, whitespace folded, id-like fields (``id``, ``*_id``, ``uuid``) dropped and
    id-like values (UUIDs, hex ids) folded, so two calls that differ only in phrasing case,
    spacing or a fresh identifier are one action.
    """

    def fold(value: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            return "<deep>"
        if isinstance(value, str):
            text = _UUID.sub("<id>", value)
            return _WS.sub(" ", text).strip().lower()
        if isinstance(value, Mapping):
            return {
                str(k).lower(): fold(v, depth + 1)
                for k, v in value.items()
                if not _ID_KEY.search(str(k))
            }
        if isinstance(value, (list, tuple)):
            return [fold(v, depth + 1) for v in value]
        return value

    plain = _plain(parse_json_value(arguments), 0, None)
    folded = fold(plain, 0)
    return name.strip().lower() + ":" + json.dumps(
        folded, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


def error_signature_text(
    tool: str, error_type: str | None, message: str | None, *, limit: int = 200
) -> str:
    """The text of an error signature: tool, error type and a normalised message.

    Paths, UUIDs, hex ids and digits in the message are folded, so the same failure
    reached with other arguments (another id, another line number) has one signature.
    """
    msg = message or ""
    msg = _UUID.sub("<id>", msg)
    msg = _PATH.sub("<path>", msg)
    msg = _HEXID.sub("<hex>", msg)
    msg = _DIGITS.sub("N", msg)
    msg = _WS.sub(" ", msg).strip().lower()[:limit]
    return f"{tool}|{error_type or ''}|{msg}"


class Digester:
    """Computes the 64-bit digests the engine compares.

    Args:
        key: optional secret; when given, digests are keyed BLAKE3 (the key is first
            derived to 32 bytes), so exported digests cannot be brute-forced.
        volatile_keys: result keys to strip before digesting a result.
    """

    __slots__ = ("_key", "_volatile", "_volatile_re")

    def __init__(self, key: bytes | str | None = None, volatile_keys: Iterable[str] = DEFAULT_VOLATILE_KEYS):
        if isinstance(key, str):
            key = key.encode("utf-8")
        self._key = (
            blake3.blake3(key, derive_key_context="otel-progress digest key v1").digest()
            if key
            else None
        )
        self._volatile = frozenset(_norm_key(k) for k in volatile_keys)
        # A cheap pre-check: a JSON result with none of these substrings needs no parsing
        # to strip volatile fields.
        alts = sorted({re.escape(k) for k in volatile_keys} | {re.escape(k) for k in self._volatile})
        self._volatile_re = re.compile("(?i)" + "|".join(alts)) if alts else None

    @property
    def keyed(self) -> bool:
        """Whether digests are keyed."""
        return self._key is not None

    def bytes_digest(self, data: bytes) -> int:
        """The 64-bit digest of raw bytes."""
        h = blake3.blake3(data, key=self._key) if self._key else blake3.blake3(data)
        return int.from_bytes(h.digest(8), "big") & 0x7FFF_FFFF_FFFF_FFFF

    def text(self, text: str) -> int:
        """The digest of a text."""
        return self.bytes_digest(text.encode("utf-8", "surrogatepass"))

    def arguments(self, arguments: Any) -> str:
        """Canonical text of call arguments (nothing stripped: arguments are the request)."""
        return canonical_json(arguments, None)

    def result(self, result: Any) -> tuple[str, Any]:
        """Canonical text of a result and the parsed result. Volatile fields are stripped
        and ISO-8601 timestamps anywhere in the text are folded to ``<ts>``, so a reply
        that differs from the last one only in the time it was served is the same reply."""
        parsed = parse_json_value(result)
        if isinstance(parsed, str):
            return _TIMESTAMP.sub("<ts>", parsed.strip()), parsed
        volatile: frozenset[str] | None = self._volatile
        if isinstance(result, str) and (self._volatile_re is None or not self._volatile_re.search(result)):
            volatile = None  # no volatile key can be present: skip the key checks
        plain = _plain(parsed, 0, volatile)
        try:
            text = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):  # pragma: no cover
            text = repr(plain)
        return _TIMESTAMP.sub("<ts>", text), parsed

    def hex(self, digest: int) -> str:
        """The exported form of a digest: 16 lower-case hex digits."""
        return f"{digest:016x}"
