"""Canonical forms and digests of tool arguments, results and errors.

Everything the engine compares goes through this module, so that two values that mean
the same thing produce one digest: JSON arriving as a string or as a map, keys in any
order, insignificant whitespace, volatile envelope fields (timestamps, request ids,
ETags, latencies) that change on every reply.

Canonical text is JSON with sorted keys and no insignificant whitespace (UTF-8 bytes,
produced with orjson; values orjson cannot encode go through a slower plain-Python path
that yields the same form). Digests are 63-bit integers taken from BLAKE3, keyed when a
digest key is configured (``OTEL_PROGRESS_DIGEST_KEY``), so that a digest exported to a
tracing backend cannot be reversed by hashing guesses of a low-entropy argument.
Digests that never leave the process (of results, of normalised actions) are Python's
own keyed hash instead (:meth:`Digester.local`): cheaper, and as good for comparing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import blake3
import orjson

from .blobs import describe, may_hold_blob

__all__ = [
    "DEFAULT_VOLATILE_KEYS",
    "Digester",
    "canonical_json",
    "error_signature_text",
    "folds_to_itself",
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
        "toolcallid",
    }
)

_MAX_DEPTH = 64
_MAX_STRING_PARSE = 4 * 1024 * 1024  # JSON strings above this are digested as text
_MAX_TEXT_FOLD = 8192  # timestamps are folded in plain-text results up to this size
_MASK = (1 << 63) - 1
_from_bytes = int.from_bytes
_SORT = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
_WS = re.compile(r"\s+")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEXID = re.compile(r"\b(?:0x)?[0-9a-fA-F]*[0-9][0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b|\b[0-9a-fA-F]{12,}\b")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.\-]+){2,}[\\/]?")
_PATH_NO_DRIVE = re.compile(r"(?:[\\/][\w.\-]+){2,}[\\/]?")
_DIGITS = re.compile(r"\d+")
_NOISE = re.compile(r"(?:[^\w\s<>]|_){2,}|(?<!\S)[^\w\s]+(?!\S)|[\r\b]|(?:N\s*[%/]\s*)+N?")
_TIMESTAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
)
# Literal-led necessary conditions (a regex that opens with a literal is searched for that
# character first, not tried at every position): a text without a match of the hint has
# no match of the pattern, so the pattern's pass is skipped.
_UUID_HINT = re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-")  # inside every _UUID match
_TIMESTAMP_HINT = re.compile(r"-\d{2}-\d{2}[T ]\d{2}:\d{2}")  # inside every _TIMESTAMP match
_ID_KEY = re.compile(r"(?:^|[_\-.])(?:id|ids|uuid|guid)$|Id$|ID$")
_ID_KEY_CACHE: dict[str, bool] = {}
_ID_KEY_END = re.compile(r'ids?":')  # in canonical JSON: a key ending in "id" or "ids"


def _norm_key(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def _is_id_key(key: str) -> bool:
    hit = _ID_KEY_CACHE.get(key)
    if hit is None:
        hit = bool(_ID_KEY.search(key))
        if len(_ID_KEY_CACHE) < 4096:
            _ID_KEY_CACHE[key] = hit
    return hit


def parse_json_value(value: Any) -> Any:
    """Return ``value`` with a JSON document in a string decoded, else unchanged.

    Only strings that look like a JSON object or array are decoded, so that a plain
    text result such as ``"3 tickets"`` stays text. Decoding errors keep the string.
    """
    if type(value) is not str:
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).decode("utf-8", "replace")
        elif not isinstance(value, str):
            return value
    if value and len(value) <= _MAX_STRING_PARSE:
        head = value[:1]
        if head != "{" and head != "[":
            head = value.lstrip()[:1]
        if head == "{" or head == "[":
            try:
                return orjson.loads(value)
            except (orjson.JSONDecodeError, RecursionError) as exc:
                if not _stdlib_may_parse(value, exc):
                    return value
            try:  # NaN/Infinity tokens, very deep nesting: the standard library's view
                return json.loads(value)
            except (ValueError, RecursionError):
                return value
    return value


def _stdlib_may_parse(text: str, exc: BaseException) -> bool:
    """Whether the standard library's ``json`` may accept a text orjson rejected, so that
    only then is it tried (its failure is an expensive exception, and most such texts are
    plain output that merely opens with a bracket). It accepts more than orjson in four
    ways only: ``NaN``/``Infinity`` tokens, lone surrogates (escaped with ``\\u`` or raw,
    so not ASCII), numbers beyond a double and nesting past orjson's depth limit (orjson
    then stops at the number or the bracket). Anything else it rejects as orjson did."""
    if "NaN" in text or "Infinity" in text or "\\u" in text or not text.isascii():
        return True
    pos = getattr(exc, "pos", None)
    if type(pos) is not int or not 0 <= pos < len(text):
        return True
    return text[pos] in "-0123456789[{"


def _plain(value: Any, depth: int, volatile: frozenset[str] | None) -> Any:
    """Convert to plain JSON-compatible data, dropping volatile keys at any depth."""
    if depth > _MAX_DEPTH:
        return "<deep>"
    if value is None or isinstance(value, (bool, int, str)):
        return value if not isinstance(value, int) or isinstance(value, bool) or abs(value) < 2**63 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
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


def _dumps(value: Any) -> bytes:
    """Sorted-key compact JSON bytes of an already plain value."""
    try:
        return orjson.dumps(value, option=_SORT)
    except (TypeError, orjson.JSONEncodeError):
        return orjson.dumps(_plain(value, 0, None), option=_SORT)


class _Unusual(Exception):
    """A value :func:`_stripped` leaves to :func:`_plain` (see there)."""


_INT_MAX = 2**63


def _stripped(value: Any, volatile: frozenset[str], cache: dict[str, bool], depth: int) -> Any:
    """``value`` without the volatile keys at any depth, for a value made of what JSON
    decodes to (dicts with string keys, lists, strings, finite floats, ints within 64
    bits, booleans, None): orjson then encodes it exactly as :func:`_plain` would convert
    it. Containers without a volatile key below them are kept as they are (not copied).
    Anything else raises :class:`_Unusual`: the caller converts the value with
    :func:`_plain` instead (a tuple, a set, another mapping type, bytes, a non-finite
    float, a big int, a non-string key, nesting past ``_MAX_DEPTH``)."""
    if depth > _MAX_DEPTH:  # (_plain makes it "<deep>")
        raise _Unusual
    kind = type(value)
    if kind is str or kind is bool or value is None or (kind is int and -_INT_MAX < value < _INT_MAX) or (
            kind is float and math.isfinite(value)):
        return value
    if kind is dict:
        out: dict[str, Any] | None = None
        for k, v in value.items():
            if type(k) is not str:
                raise _Unusual
            vol = cache.get(k)
            if vol is None:
                vol = _norm_key(k) in volatile
                if len(cache) < 8192:
                    cache[k] = vol
            new = _DROPPED if vol else _stripped(v, volatile, cache, depth + 1)
            if out is None and new is not v:
                out = {}
                for k2, v2 in value.items():  # the keys before this one: checked, unchanged
                    if k2 is k:
                        break
                    out[k2] = v2
            if out is not None and new is not _DROPPED:
                out[k] = new
        return value if out is None else out
    if kind is list:
        items: list[Any] | None = None
        for i, v in enumerate(value):
            new = _stripped(v, volatile, cache, depth + 1)
            if items is not None:
                items.append(new)
            elif new is not v:
                items = value[:i]
                items.append(new)
        return value if items is None else items
    raise _Unusual


_DROPPED = object()  # (what _stripped makes of a volatile key's value)


def _canonical_bytes(parsed: Any, volatile: frozenset[str] | None, cache: dict[str, bool] | None = None) -> bytes:
    if volatile is None:
        try:
            return orjson.dumps(parsed, option=_SORT)
        except (TypeError, orjson.JSONEncodeError):
            pass
    elif cache is not None and type(parsed) in _CONTAINERS:
        try:
            return orjson.dumps(_stripped(parsed, volatile, cache, 0), option=_SORT)
        except _Unusual:
            pass
    return _dumps(_plain(parsed, 0, volatile))


def strip_volatile(value: Any, volatile: Iterable[str] = DEFAULT_VOLATILE_KEYS) -> Any:
    """Return ``value`` (parsed if it is a JSON string) without volatile keys, at any depth."""
    keys = frozenset(_norm_key(k) for k in volatile)
    return _plain(parse_json_value(value), 0, keys)


def canonical_json(value: Any, volatile: frozenset[str] | None = None) -> str:
    """The canonical text of a value: JSON with sorted keys and no extra whitespace.

    ``value`` may be a map, a list, a scalar or a string holding JSON. ``volatile`` holds
    already-normalised key names (see :class:`Digester`) to drop at any depth.
    """
    return _canonical_bytes(parse_json_value(value), volatile).decode("utf-8")


def _fold_text(value: str) -> str:
    if len(value) >= 36 and "-" in value and _UUID_HINT.search(value) is not None:
        value = _UUID.sub("<id>", value)
    return " ".join(value.split()).lower()


def _fold(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return "<deep>"
    kind = type(value)
    if kind is int or kind is float or kind is bool or value is None:
        return value  # the common leaves first: no ABC check (they are returned as they are)
    if kind is str:
        return _fold_text(value)
    if isinstance(value, str):
        return _fold_text(value)
    if kind is dict and depth < _MAX_DEPTH:
        # (the items' leaves folded here, as _fold(item, depth + 1) would fold them)
        out = {}
        for k, v in value.items():
            ks = k if type(k) is str else str(k)
            hit = _ID_KEY_CACHE.get(ks)
            if hit is None:
                hit = _is_id_key(ks)
            if hit:
                continue
            kv = type(v)
            if kv is str:
                v = _fold_text(v)
            elif not (kv is int or kv is float or kv is bool or v is None):
                v = _fold(v, depth + 1)
            out[ks.lower()] = v
        return out
    if kind is dict or isinstance(value, Mapping):
        return {str(k).lower(): _fold(v, depth + 1) for k, v in value.items() if not _is_id_key(str(k))}
    if isinstance(value, (list, tuple)):
        return [_fold(v, depth + 1) for v in value]
    return value


def normalise_action(name: str, arguments: Any) -> bytes:
    """The decision-relevant form of a call, for state signatures (seed 003).

    Lower-cased, whitespace folded, id-like fields (``id``, ``*_id``, ``uuid``) dropped and
    UUIDs folded, so two calls that differ only in phrasing case, spacing or a fresh
    identifier are one action.
    """
    return name.strip().lower().encode("utf-8") + b":" + _dumps(_fold(parse_json_value(arguments), 0))


def folds_to_itself(canonical: bytes) -> bool:
    """Whether folding (:func:`normalise_action`) leaves a JSON-decoded value unchanged,
    judged from the value's canonical bytes alone, so that they can stand for the folded
    form without walking the value in Python.

    Valid only for a value decoded from JSON text (``parse_json_value`` of a string): its
    keys are strings and its containers dicts and lists. Then, when this returns True,
    ``_dumps(_fold(value, 0)) == canonical``, because in ASCII canonical JSON without a
    backslash every string (key or value) appears verbatim between two quotes, so:

    * no byte above 127 and no ``A``-``Z``: lower-casing changes no string;
    * no backslash (so no escaped control character or whitespace), no two spaces in a
      row and no space just inside a quote: splitting on whitespace and joining with one
      space changes no string;
    * no ``id":`` / ``ids":``: no key ends in ``id`` or ``ids``, so none is an id key
      (the ``Id``/``ID`` forms need a capital letter);
    * at most ``_MAX_DEPTH`` brackets (a text that short cannot hold more), so no value
      is nested deeper than folding goes;
    * no UUID anywhere in the text, so none in any string.

    Anything else (including a marker or a bracket inside a string) answers False, and
    the caller folds the value the slow way. The checks run on a ``str`` because
    substring tests on one are much cheaper than on ``bytes``.
    """
    if not canonical.isascii():
        return False
    text = canonical.decode("ascii")
    if "\\" in text or text.lower() != text:
        return False
    if " " in text and ("  " in text or '" ' in text or ' "' in text):
        return False
    if _ID_KEY_END.search(text) is not None:
        return False
    if len(text) > 2 * _MAX_DEPTH and text.count("{") + (text.count("[") if "[" in text else 0) > _MAX_DEPTH:
        return False
    return "-" not in text or _UUID_HINT.search(text) is None or _UUID.search(text) is None


def _normalise_message(msg: str) -> str:
    if "-" in msg and _UUID_HINT.search(msg) is not None:
        msg = _UUID.sub("<id>", msg)
    if "/" in msg or "\\" in msg:  # (a path has at least two separators)
        # Without a drive letter before a separator, only _PATH's second form can match:
        # the same matches, found by a pattern that opens with the separator.
        msg = (_PATH if ":/" in msg or ":\\" in msg else _PATH_NO_DRIVE).sub("<path>", msg)
    msg = _HEXID.sub("<hex>", msg)
    msg = _DIGITS.sub("N", msg)
    msg = _NOISE.sub(" ", msg)
    return _WS.sub(" ", msg).strip().lower()


def error_signature_text(
    tool: str, error_type: str | None, message: str | None, *, limit: int = 200
) -> str:
    """The text of an error signature: tool, error type and a normalised message.

    Paths, UUIDs, hex ids and digits in the message are folded, so the same failure
    reached with other arguments (another id, another line number) has one signature;
    so are runs of punctuation (progress bars, spinners, ``....``), so a killed command
    whose partial output differs in how far its progress display got is one failure.
    A long message keeps its head and its tail (``limit / 2`` characters each, after
    normalising): a traceback or a build log names its cause in its last lines, so two
    failures that start alike and end differently are two failures.
    """
    text = message or ""
    if len(text) > limit * 4:
        head, tail = _normalise_message(text[: limit * 2]), _normalise_message(text[-limit * 2:])
    else:
        head = tail = _normalise_message(text)
    if len(head) <= limit and head is tail:
        msg = head
    else:
        half = limit // 2
        msg = head[:half] + " … " + tail[-half:]
    return f"{tool}|{error_type or ''}|{msg}"

def failure_signature_text(tool: str, error_type: str | None, output: str | None) -> str:
    """The text a failure is identified by: tool, error type and the *whole* output of the
    failure (the captured result, else the exception text), never truncated to a first
    line or to a head and a tail. A script that fails with
    another traceback, a test that fails with another assertion, a linter that reports
    something else, a path that does not exist where the last one did not either: each
    says something the run has not heard, and is another failure. (A failure that
    differs from the last one of its tool only in volatile tokens, a temporary path or a
    duration, is that failure: the engine tells it lazily, see
    :class:`~otel_progress.evidence.volatile.Answers`.)"""
    return f"{tool}|{error_type or ''}|{output or ''}"


_CONTAINERS = (dict, list, tuple)


def _keys(value: Any) -> set[str]:
    """Every mapping key at any depth of a parsed JSON value."""
    keys: set[str] = set()
    stack = [value]
    push = stack.append
    depth = 0
    while stack and depth < 100_000:
        node = stack.pop()
        depth += 1
        kind = type(node)
        if kind is dict:
            keys.update(node)
            for v in node.values():
                if type(v) in _CONTAINERS:
                    push(v)
        elif kind is list or kind is tuple:
            for v in node:
                if type(v) in _CONTAINERS:
                    push(v)
    return keys


_CHECK_EVERY = 16  # results of a tool with no volatile key so far are re-checked this often
_CHECK_FIRST = 8  # the first results of each tool are always checked
_MAX_TOOLS = 1024


class Digester:
    """Computes the digests the engine compares.

    Args:
        key: optional secret; when given, digests are keyed BLAKE3 (the key is first
            derived to 32 bytes), so exported digests cannot be brute-forced.
        volatile_keys: result keys to strip before digesting a result.
    """

    __slots__ = ("_blake3", "_key", "_key_cache", "_tools", "_volatile")

    def __init__(self, key: bytes | str | None = None, volatile_keys: Iterable[str] = DEFAULT_VOLATILE_KEYS):
        if isinstance(key, str):
            key = key.encode("utf-8")
        self._key = (
            blake3.blake3(key, derive_key_context="otel-progress digest key v1").digest()
            if key
            else None
        )
        # blake3.blake3 with the key, if any, already bound: digest() calls it per call.
        self._blake3: Callable[[bytes], Any] = (
            partial(blake3.blake3, key=self._key) if self._key is not None else blake3.blake3
        )
        self._volatile = frozenset(_norm_key(k) for k in volatile_keys)
        self._key_cache: dict[str, bool] = {}
        # Per tool: -1 once a result of it held a volatile key (always strip), else how
        # many of its results were checked and found clean (check only now and then).
        self._tools: dict[str, int] = {}

    @property
    def keyed(self) -> bool:
        """Whether digests are keyed."""
        return self._key is not None

    def digest(self, data: bytes) -> int:
        """The 63-bit digest of bytes."""
        return _from_bytes(self._blake3(data).digest(8), "big") >> 1

    @staticmethod
    def local(data: bytes) -> int:
        """A 63-bit digest of bytes that is only ever compared inside this process.

        It is Python's own hash of the bytes (SipHash, with a secret seed drawn when the
        process starts): several times cheaper than BLAKE3 on a long result, and as good
        for telling results apart, since equal bytes give equal digests and different
        bytes collide with odds of 2**-63. The seed differs from process to process, so
        such a digest must never be exported, persisted or compared with one made by
        another process. The engine uses it for what it only compares: result digests
        (evidence, turn keys) and normalised actions and state signatures (the signature
        a detection exports is recomputed with :meth:`digest`).
        """
        return hash(data) & _MASK

    @staticmethod
    def local_text(text: str) -> int:
        """:meth:`local` of the UTF-8 bytes of ``text``. An ASCII ``str`` hashes exactly
        as its bytes do (CPython hashes the same one-byte buffer either way), so such a
        text is hashed without encoding a copy of it first."""
        if text.isascii():
            return hash(text) & _MASK
        return hash(text.encode("utf-8", "surrogatepass")) & _MASK

    def text(self, text: str) -> int:
        """The digest of a text."""
        return self.digest(text.encode("utf-8", "surrogatepass"))

    def arguments(self, arguments: Any) -> bytes:
        """Canonical bytes of call arguments (nothing stripped: arguments are the request).
        ``arguments`` may be a JSON string or already parsed."""
        if type(arguments) is dict or type(arguments) is list:
            return _canonical_bytes(arguments, None)  # already parsed: parse_json_value would return it
        return _canonical_bytes(parse_json_value(arguments), None)

    def _volatile_in(self, parsed: Any, tool: str | None) -> bool:
        """Whether a parsed result holds a volatile key. Results of one tool share a
        schema, so a tool whose results never held one is only checked now and then."""
        seen = self._tools.get(tool, 0) if tool is not None else 0
        if seen < 0:
            return True
        if seen >= _CHECK_FIRST and seen % _CHECK_EVERY:
            if tool is not None:
                self._tools[tool] = seen + 1
            return False
        cache = self._key_cache
        hit = False
        for key in _keys(parsed):
            vol = cache.get(key)
            if vol is None:
                vol = _norm_key(key) in self._volatile if isinstance(key, str) else False
                if len(cache) < 8192:
                    cache[key] = vol
            if vol:
                hit = True
                break
        if tool is not None:
            if len(self._tools) >= _MAX_TOOLS and tool not in self._tools:
                self._tools.clear()
            self._tools[tool] = -1 if hit else seen + 1
        return hit

    def strips(self, tool: str) -> bool:
        """Whether every result of ``tool`` loses its volatile keys from now on (one of its
        results held one): :meth:`result` is then a function of the result alone."""
        return self._tools.get(tool) == -1

    def raw_result(self, result: str, tool: str, unless: Callable[[str], bool] | None = None) -> int | None:
        """The :meth:`local_text` digest of a long JSON result taken as received, without
        parsing, when that is allowed: ``unless(result)`` (a check of the text, if given)
        is false and the tool's results were checked and never held a volatile key.
        Results of one tool come from one serialiser, so equal results are equal texts. A
        sample of them is still checked (a volatile key found switches the tool to the
        full path for good). None: digest the parsed result (:meth:`result`).

        ``unless`` runs before the sample check (which it may spare), and not at all for a
        tool whose results are known to hold volatile keys."""
        tools = self._tools
        seen = tools.get(tool, 0)
        if seen < 0 or (unless is not None and unless(result)):  # seen == -1: a tool marked volatile
            return None
        if seen < _CHECK_FIRST or seen % _CHECK_EVERY == 0:
            if self._volatile_in(parse_json_value(result), tool):
                return None
        else:
            tools[tool] = seen + 1
        return self.local_text(result)

    def result(self, result: Any, tool: str | None = None) -> tuple[bytes, Any]:
        """Canonical bytes of a result, and the parsed result.

        JSON results lose their volatile keys at any depth (``tool`` names the tool, so
        that results of a tool whose schema has none need not be searched each time).
        Plain-text results have ISO-8601 timestamps folded to ``<ts>``, so a reply that
        differs from the last one only in the time it was served is the same reply. A
        result given as text that may hold a blob (a screenshot, a data URL: blobs.py) has
        each blob replaced by its descriptor, in the parsed result too.
        """
        parsed = parse_json_value(result)
        if type(result) is str and may_hold_blob(result):
            parsed = describe(parsed)
        if isinstance(parsed, str):
            text = parsed.strip()
            if len(text) <= _MAX_TEXT_FOLD and "-" in text and _TIMESTAMP_HINT.search(text) is not None:
                text = _TIMESTAMP.sub("<ts>", text)
            return text.encode("utf-8", "surrogatepass"), parsed
        if self._volatile and isinstance(parsed, _CONTAINERS) and self._volatile_in(parsed, tool):
            return _canonical_bytes(parsed, self._volatile, self._key_cache), parsed
        if isinstance(parsed, Mapping) and not isinstance(parsed, dict):
            return _canonical_bytes(parsed, self._volatile or None), parsed
        return _canonical_bytes(parsed, None), parsed

    def hex(self, digest: int) -> str:
        """The exported form of a digest: 16 lower-case hex digits."""
        return f"{digest:016x}"
