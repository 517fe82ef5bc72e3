"""Volatile tokens in plain text: what changes from one run of a command to the next
while what the command says stays the same.

A reproduction script run twice prints the same traceback with another temporary
directory (``/tmp/tmpab12cd``), another object address (``0x7f3a…``), another time stamp
or another duration (``in 0.53s``): the world answered the same thing twice. Two such
answers are one answer once these tokens are masked:

* temporary paths (``/tmp/…``, ``/var/tmp/…``, ``/var/folders/…``, ``/private/tmp/…``);
* memory addresses (``0x`` and 4 or more hex digits);
* time stamps (``2026-12-07T01:36:56.123Z``, ``2026-12-07 01:36``) and clock times
  (``01:36:56``);
* durations (a number with a unit of time: ``0.53s``, ``12 ms``, ``3 seconds``);
* process ids and ports named as such (``pid 4242``, ``port=54321``, ``localhost:8000``);
* progress displays: percentages (``37%``) and runs of bar, spinner or dot characters
  (``=====>``, ``|||``, ``....``), as far as a killed command's display got;
* line numbers of source locations (``indexing.py:191``, ``app.ts:12:5``, a traceback's
  ``File "x.py", line 191``):
  an edit above moves them while the failure stays the same;
* opaque tokens (UUIDs, hex runs, request ids, base64 blobs: :mod:`.opaque`).

Counters, words, versions, sizes and other small numbers are content: a poll whose
``1/4`` became ``2/4`` advanced. :func:`mask_volatile` is applied in two places, both
learned rather than assumed where a digest is concerned:

* :class:`~otel_progress.evidence.opaque.OpaqueText` masks a tool's plain-text answers
  once the tool's identical request got an answer that differed from the previous one
  only in such tokens (the tokens changed while the rest stayed);
* the answer a call returned (:func:`answer_text`), compared across requests by the
  ``same_answer`` signal: the same check answered the same way whatever the request.
"""

from __future__ import annotations

import re

from .opaque import mask_opaque

__all__ = ["MASK", "answer_text", "mask_volatile"]

MASK = "<v>"
_MAX_TEXT = 262_144  # longer texts keep their head and tail (128 KiB each) for the comparison

# One pattern per token class, each tried only when a substring it needs is in the text
# (a scan per class costs more than the substring checks on the usual answer).
_TEMP = re.compile(r"(?:/private)?/(?:tmp|var/tmp|var/folders)/[^\s'\"`,;:)\]}>]+")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{4,}\b")
_TIME = re.compile(
    r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"  # time stamps
    r"|\b\d\d:\d\d:\d\d(?:[.,]\d+)?\b"  # clock times
)
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|us|µs|ns|s|sec|secs|seconds)\b")
# a line number in a source location: ``indexing.py:191``, ``app.ts:12:5``, a traceback's
# ``File "x.py", line 191``
_LINE = re.compile(r"(\.[A-Za-z]{1,5}):\d+(?::\d+)?\b|(?<=\", )line \d+\b")
_PROCESS = re.compile(r"\b(?:pid|PID|port|Port|PORT)[ =:#]+\d+\b"
                      r"|\b(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1?\]):\d{2,5}\b")
# a progress display: a percentage, a run of 3+ bar, spinner or dot characters, or a word of them
_BAR = "[-|/\\\\.=#>*━─█▏▎▍▌▋▊▉░▒▓]"
_PROGRESS = re.compile(rf"\b\d{{1,3}}(?:\.\d+)?%|{_BAR}{{3,}}|(?<!\S){_BAR}+(?!\S)")
_WS = re.compile(r"\s+")


def _line(match: re.Match[str]) -> str:
    extension = match.group(1)
    return MASK if extension is None else extension + ":" + MASK


def mask_volatile(text: str, opaque: bool = True) -> str:
    """``text`` with every volatile token (module docstring) replaced by ``<v>`` and, with
    ``opaque``, every opaque token by ``<id>``. Texts over 256 KiB keep their head and tail."""
    if len(text) > _MAX_TEXT:
        half = _MAX_TEXT // 2
        text = text[:half] + "\n…\n" + text[-half:]
    if "/tmp/" in text or "/var/" in text:
        text = _TEMP.sub(MASK, text)
    if "0x" in text:
        text = _ADDRESS.sub(MASK, text)
    if ":" in text:
        text = _TIME.sub(MASK, text)
    if "s" in text:
        text = _DURATION.sub(MASK, text)
    if ":" in text or '", line ' in text:
        text = _LINE.sub(_line, text)
    if "%" in text or "..." in text or "---" in text or "===" in text or "━" in text or "|" in text:
        text = _PROGRESS.sub(MASK, text)
    if "id" in text or "ID" in text or "ort" in text or "ORT" in text or "localhost:" in text or "0.0." in text:
        text = _PROCESS.sub(MASK, text)
    return mask_opaque(text) if opaque else text


def answer_text(text: str, opaque: bool = False) -> str:
    """The text an answer is compared by across requests: volatile tokens masked (and
    opaque ones, with ``opaque``: for a tool learned to answer with them), runs of white
    space folded (a re-run that wraps a line or pads a column differently says the same)."""
    return _WS.sub(" ", mask_volatile(text, opaque)).strip()
