"""Blobs are not novelty: a screenshot, an image, a binary payload or a data URL inside a
result is compared by what describes it, never by its bytes.

A browser agent's every result carries a screenshot; one that differs from the last by a
clock pixel has other bytes, so its digest is new every time and a loop would look like
progress. Here each blob is replaced by a descriptor of its kind and size class, and the
rest of the result (its text parts, caption, URL, MIME type fields) is compared as it is:

* a data URL (``data:image/png;base64,…``) becomes ``<blob image/png ~64KiB>``;
* a run of 256 or more base64 characters that looks like encoded bytes (upper-case and
  lower-case letters and digits in it) becomes ``<blob image/png ~64KiB>`` when its first
  bytes name a known format (PNG, JPEG, GIF, WebP, PDF), else ``<blob binary ~64KiB>``.

The size class is the decoded size rounded up to a power of two: a picture that grew
from 40 to 50 KB is the same class, one of another order of size is not.

The check is made only where a blob makes up much of a text (:func:`may_hold_blob`: three
windows of 256 characters, about a microsecond whatever the size: a check of the whole
text on every result would cost as much as digesting it); :func:`describe_text` and
:func:`describe` then find and replace every blob in it.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MIN_BLOB", "describe", "describe_text", "holds_blob", "may_hold_blob"]

MIN_BLOB = 256  # base64 characters (192 bytes): shorter runs are identifiers, not payloads
_MIN_TEXT = 1024  # texts shorter than this hold no payload run worth a scan (data URLs aside)
_B64 = "A-Za-z0-9+/"
_RUN = re.compile(rf"(?<![{_B64}])[{_B64}]{{{MIN_BLOB},}}={{0,2}}(?![{_B64}=])")
_DATA_URL = re.compile(rf"data:([\w.+-]+/[\w.+-]+)?(?:;[\w.-]+=[^;,\s\"']*)*;base64,([{_B64}]*={{0,2}})")
#: The base64 form of the first bytes of the formats a payload is named by.
_MAGIC = (("iVBORw0KGgo", "image/png"), ("/9j/", "image/jpeg"), ("R0lGOD", "image/gif"),
          ("UklGR", "image/webp"), ("JVBERi0", "application/pdf"))


#: The base64 alphabet as one byte, every other byte as another (bytes.translate): a
#: payload's shape is then a run of MIN_BLOB equal bytes, found by a substring search.
_SHAPE = bytes.maketrans(b"".join(bytes((c,)) for c in range(256)),
                         bytes(97 if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "+/") else 32
                               for c in range(256)))
_SHAPE_RUN = b"a" * MIN_BLOB


def may_hold_blob(text: str) -> bool:
    """Whether ``text`` may hold a blob that makes up much of it (a cheap, one-sided test,
    about a microsecond whatever the size: False means it holds none that is a quarter of
    it or more): 1 KiB or more, and a 256-character window at a quarter, half or three
    quarters of it made only of base64 characters. A payload that is most of a result
    (a screenshot beside its page's text) covers one of the three; a small one inside a
    long text is part of that text."""
    n = len(text)
    if n < _MIN_TEXT:
        return False
    for start in (n >> 1, n >> 2, (3 * n) >> 2):
        window = text[start:start + MIN_BLOB]
        if " " in window or "\n" in window:  # (prose, a log: the usual case, told at once)
            continue
        if window.encode("utf-8", "surrogatepass").translate(_SHAPE) == _SHAPE_RUN:
            return True
    return False


def holds_blob(text: str) -> bool:
    """Whether ``text`` holds a data URL or a base64 payload (:func:`describe_text` would
    change it)."""
    return may_hold_blob(text) and describe_text(text) != text


def _size_class(characters: int) -> str:
    """The decoded size of ``characters`` base64 characters, rounded up to a power of two."""
    size = max(1, characters * 3 // 4)
    bound = 1 << (size - 1).bit_length()
    return f"~{bound >> 20}MiB" if bound >= 1 << 20 else f"~{bound >> 10}KiB" if bound >= 1024 else f"~{bound}B"


def _looks_encoded(run: str) -> bool:
    """Whether a base64-alphabet run looks like encoded bytes rather than a word or a
    hex digest: upper-case and lower-case letters and digits all in it."""
    return (any(c.isdigit() for c in run) and any(c.isupper() for c in run)
            and any(c.islower() for c in run))


def _payload(match: re.Match[str]) -> str:
    run = match.group(0)
    if not _looks_encoded(run):
        return run
    kind = next((mime for magic, mime in _MAGIC if run.startswith(magic)), "binary")
    return f"<blob {kind} {_size_class(len(run.rstrip('=')))}>"


def _data_url(match: re.Match[str]) -> str:
    return f"<blob {match.group(1) or 'binary'} {_size_class(len(match.group(2).rstrip('=')))}>"


def describe_text(text: str) -> str:
    """``text`` with each data URL and base64 payload replaced by its descriptor (the
    same text when it holds none)."""
    if ";base64," in text:
        text = _DATA_URL.sub(_data_url, text)
    if len(text) >= MIN_BLOB:
        text = _RUN.sub(_payload, text)
    return text


def describe(value: Any, depth: int = 0) -> Any:
    """A parsed result with every string in it :func:`describe_text`-ed (the same object
    where nothing changed; copies only along the way to a blob)."""
    if type(value) is str:
        return describe_text(value) if len(value) >= MIN_BLOB or ";base64," in value else value
    if depth > 64:
        return value
    if type(value) is dict:
        changed = None
        for key, item in value.items():
            new = describe(item, depth + 1)
            if new is not item:
                if changed is None:
                    changed = dict(value)
                changed[key] = new
        return value if changed is None else changed
    if type(value) is list:
        items = [describe(item, depth + 1) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value
