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
* in a failure's output, progress displays: percentages (``37%``) and runs of bar,
  spinner or dot characters (``=====>``, ``|||``, ``....``), as far as a killed
  command's display got;
* line numbers of source locations (``indexing.py:191``, ``app.ts:12:5``, a traceback's
  ``File "x.py", line 191``):
  an edit above moves them while the failure stays the same;
* UUIDs (other opaque tokens, request ids and base64 blobs, are learned per tool by
  :mod:`.opaque`).

Counters, words, versions, sizes and other small numbers are content: a poll whose
``1/4`` became ``2/4`` advanced. The masks are taken only where they can matter, and
learned per tool rather than assumed:

* :class:`~otel_progress.evidence.opaque.OpaqueText` compares the identical request's
  answer with the tool's previous one, masked, only when the two differ;
* :class:`Answers` compares an answer or a failure with its tool's last one of the same
  shape (as many lines, nearly as long), masked, only when the two differ; the
  ``same_answer`` and ``errors`` signals then see one answer, one failure.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["MASK", "Answers", "answer_text", "mask_volatile"]

MASK = "<v>"
_MAX_TEXT = 16_384  # longer texts are compared by their head and tail (8 KiB each) and their length

# One pattern per token class, each tried only when a substring it needs is in the text.
# Every pattern opens with a literal or a character class, never with an assertion: the
# regular expression engine then skips the positions where no token can start (several
# times faster on an output that holds none, the usual case).
_TEMP = re.compile(r"/(?:private/)?(?:tmp|var/tmp|var/folders)/[^\s'\"`,;:)\]}>]+")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"  # time stamps
                   r"|\d\d:\d\d:\d\d(?:[.,]\d+)?")  # clock times
_DURATION = re.compile(r"\d+(?:\.\d+)?\s?(?:ms|us|µs|ns|sec|secs|seconds|s)\b")
# a line number in a source location: ``indexing.py:191``, ``app.ts:12:5``, a traceback's
# ``File "x.py", line 191``
_SOURCE_LINE = re.compile(r"(\.[A-Za-z]{1,5}):\d+(?::\d+)?\b")
_TRACEBACK_LINE = re.compile(r'", line \d+')
# a progress display: a percentage, a run of 3+ bar, spinner or dot characters, or a word
# made of them
_BAR = "[-|/\\\\.=#>*━─█▏▎▍▌▋▊▉░▒▓]"
_PERCENT = re.compile(r"\d{1,3}(?:\.\d+)?%")
_BARS = re.compile(rf"{_BAR}{{3,}}|[ \t]{_BAR}{{1,2}}(?=\s)")
_PROCESS = re.compile(r"(?:pid|PID|port|Port|PORT)[ =:#]+\d+")
_LOCAL_PORT = re.compile(r"(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1?\]):\d{2,5}")
_WS = re.compile(r"\s+")
# The shapes the patterns below are looked for in (as UTF-8 bytes: bytes.translate is a table
# lookup a byte, where str.translate looks each character up in a dict, and a text cut to its
# head and tail holds a non-ASCII "…"): every digit a 0, and every hex digit a 0.
_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_HEX = b"0123456789abcdefABCDEF"
_HEX_ZEROS = bytes.maketrans(_HEX, b"0" * len(_HEX))
_UNITS = (b"0s", b"0 s", b"0ms", b"0us", b"0ns", "0µs".encode())  # a duration's, in the digit shape


def mask_volatile(text: str, progress: bool = False) -> str:
    """``text`` with every volatile token (module docstring) replaced by ``<v>``; with
    ``progress``, progress displays too
    (a failure's: how far a killed command's display got; in an answer that succeeded, a
    row of dots or dashes may be content, a maze or a table). A text over 16 KiB is read as its head and
    tail (8 KiB each) and its size in KiB: an output that long is told apart by where it
    starts and ends."""
    if len(text) > _MAX_TEXT:
        half = _MAX_TEXT // 2
        text = f"{text[:half]}\n… {len(text) // 1024} KiB …\n{text[-half:]}"
    if "/tmp/" in text or "/var/" in text:
        text = _TEMP.sub(MASK, text)
    if "0x" in text:
        text = _ADDRESS.sub(MASK, text)
    if text.count("-") >= 4 and b"0000-0000-0000-" in text.encode("utf-8", "surrogatepass").translate(_HEX_ZEROS):
        text = _UUID.sub(MASK, text)
    if ":" in text:
        text = _SOURCE_LINE.sub(r"\1:" + MASK, text)
    if '", line ' in text:
        text = _TRACEBACK_LINE.sub('", ' + MASK, text)
    # (the digit classes below are looked for in a copy with every digit a 0: a substring
    # test is far cheaper than a scan by a pattern that opens with a digit)
    shape = text.encode("utf-8", "surrogatepass").translate(_ZEROS)
    if b"00:00" in shape:
        text = _TIME.sub(MASK, text)
    if any(unit in shape for unit in _UNITS):
        text = _DURATION.sub(MASK, text)
    if progress:
        if b"0%" in shape:
            text = _PERCENT.sub(MASK, text)
        text = _BARS.sub(" " + MASK, text)
    if "id" in text or "ID" in text or "ort" in text or "ORT" in text:
        text = _PROCESS.sub(MASK, text)
    if "localhost:" in text or "127.0.0.1:" in text or "0.0.0.0:" in text or "[::" in text:
        text = _LOCAL_PORT.sub(MASK, text)
    return text


def answer_text(text: str, progress: bool = False) -> str:
    """The text an answer is compared by: volatile tokens masked (progress displays too,
    with ``progress``: a failure's), runs of white space folded (a re-run that wraps a line
    or pads a column differently says the same)."""
    return _WS.sub(" ", mask_volatile(text, progress)).strip()


_KEEP_SHAPES = 4  # shapes (line counts) per tool
_KEEP_TOOLS = 8


class Answers:
    """One run's memory of its tools' recent answers, to tell an answer that differs from
    an earlier one only in volatile tokens (cheaply: a mask is taken only then).

    Masking never adds or removes a line, and changes a length by a few characters a
    token, so two answers that are one after masking have as many lines and nearly the
    same length. Per tool (a failure's slot is its tool and error type), the last answer
    of each line count is remembered by its digest, its identity, its length and, once
    taken, its masked digest (never its text: the memory stays a few tuples a run). A new
    answer that differs from it but is as long within a sixteenth is masked and compared,
    and is given its identity when the two are one after masking. The first answer of a
    shape is never masked (its text is not kept), so a repetition that differs only in
    volatile tokens is recognised from its second answer on: the third occurrence is the
    second one of the same identity."""

    __slots__ = ("_tools",)

    def __init__(self) -> None:
        # tool -> line count -> (its digest, its identity, its masked digest or None, its length)
        self._tools: dict[str, dict[int, tuple[int, int, int | None, int]]] = {}

    def identity(self, tool: str, text: str, digest: int, digest_text: Callable[[str], int],
                 progress: bool = False) -> int:
        """The identity of ``tool``'s answer ``text`` (``digest``: its own digest;
        ``digest_text``: how a masked text is digested; ``progress``: a failure's, whose
        progress display is masked too)."""
        tools = self._tools
        shapes = tools.get(tool)
        if shapes is None:
            if len(tools) >= _KEEP_TOOLS:
                tools.pop(next(iter(tools)))
            shapes = tools[tool] = {}
        lines = text.count("\n")
        kept = shapes.get(lines)
        identity, masked = digest, None
        if kept is not None:
            if kept[0] == digest:
                return kept[1]
            if abs(kept[3] - len(text)) <= (len(text) >> 4) + 32:
                masked = digest_text(answer_text(text, progress=progress))
                if masked == kept[2]:
                    identity = kept[1]
        elif len(shapes) >= _KEEP_SHAPES:
            shapes.pop(next(iter(shapes)))
        shapes[lines] = (digest, identity, masked, len(text))
        return identity
