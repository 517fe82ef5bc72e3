"""Opaque tokens inside plain text: request ids, hex and base64 blobs, UUIDs, session ids.

A reply that differs from the last one only in such tokens (``Request 7f3a9c21e0b4: no
results``) says nothing new, but its digest is new every time. JSON envelope fields of
that kind are learned by :class:`~otel_progress.evidence.content.ResultMemory`; this module does
the same for plain text:

* :func:`is_opaque`: a token that looks machine-made: a UUID, a hex run of 8+ characters
  with a digit and a letter, a whole number of 10+ digits (an epoch time), or an
  identifier of 12+ characters whose character class changes again and again (a base64
  blob, a request id). Words, versions, dates, counters and short numbers are content.
* :func:`mask_opaque`: a text with its opaque tokens replaced by ``<id>``.
* :class:`OpaqueText`: what one run learns: a tool whose identical request got a text
  that differs from the previous answer only in opaque tokens has them masked from then
  on before its plain-text results are digested. An answer to the identical request that
  differs from the last one only in volatile tokens (:mod:`.volatile`: a temporary
  path, an address, a time, a duration) is that answer, compared only then. Learned, not assumed: a tool whose
  identical requests return identical texts (or texts that differ in words) keeps exact
  digests, so a new commit hash in ``git log`` after a commit stays new.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["OpaqueText", "is_opaque", "mask_opaque"]

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"(?:0x)?[0-9a-fA-F]{8,}")
# A candidate: a run of 8+ identifier characters with a digit and a letter, or of 10+ digits.
# (It opens with its first character, then asserts that nothing of the token came before it
# and that a digit is in it: a pattern that opens with a character class lets the regular
# expression engine skip the positions where no token starts; 30 % faster on real outputs.)
_CANDIDATE = re.compile(r"[A-Za-z0-9](?<![\w+-][A-Za-z0-9])(?:(?<=\d)|(?=[\w+.:-]*\d))[\w+.:-]{7,}"
                        r"(?<![.:-])(?![\w+-])")
_MAX_TEXT = 65536  # longer texts are never masked (digested as they are)
_MAX_TOOLS = 16
MASK = "<id>"


def _changes(token: str, enough: int) -> bool:
    """Whether the character class (digit, lower, upper) changes at least ``enough`` times
    along ``token`` (read only as far as that takes)."""
    changes, last = 0, 0
    for ch in token:
        kind = 1 if ch.isdigit() else 2 if ch.islower() else 3 if ch.isupper() else last
        if last and kind != last:
            changes += 1
            if changes >= enough:
                return True
        last = kind
    return False


def is_opaque(value: str) -> bool:
    """Whether a whole value is an opaque token: a UUID, a hex run of 8+ characters with a
    digit and a letter, a whole number of 10+ digits (an epoch time), or an identifier
    of 12+ characters whose character class (digit, lower, upper) changes 4 times or
    more (a base64 blob, a request id). Words, versions, dates and short numbers are
    content, and so is a value with white space in it (words: a search query, a title)."""
    n = len(value)
    if n < 8 or n > 4096 or " " in value:
        return False
    if value.isdigit():
        return n >= 10
    if _HEX.fullmatch(value):
        return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
    if _UUID.fullmatch(value):
        return True
    return n >= 12 and any(c.isalpha() for c in value) and _changes(value, 4)


def _mask(match: re.Match[str]) -> str:
    token = match.group(0)
    if is_opaque(token):
        return MASK
    # an identifier made of parts (``E171:FA573:405053D``, ``id_9f3a…``): mask each part
    parts = re.split(r"([:._-])", token)
    if len(parts) == 1:
        return token
    return "".join(MASK if len(p) >= 4 and (is_opaque(p) or (_HEX.fullmatch(p) and any(c.isdigit() for c in p)
                                             and any(c.isalpha() for c in p))) else p for p in parts)


def mask_opaque(text: str) -> str:
    """``text`` with every opaque token replaced by ``<id>``."""
    if len(text) > _MAX_TEXT:
        return text
    return _CANDIDATE.sub(_mask, text)


class OpaqueText:
    """One run's learning of the tools whose plain-text answers carry opaque tokens.

    Per tool it keeps the last plain-text answer and its request (a reference, no copy),
    and the set of tools learned: bounded to a few tools."""

    __slots__ = ("_last", "_volatile", "learned")

    def __init__(self, volatile: Callable[[str], str] | None = None) -> None:
        self._last: dict[str, tuple[int, str]] = {}  # tool -> (request, its last plain-text answer)
        self.learned: set[str] = set()
        # how volatile tokens are masked (the engine passes volatile.mask_volatile): an
        # answer to the identical request that differs from the last one only in them is
        # that answer (compared only then: no mask is taken on any other answer)
        self._volatile = volatile

    def text_to_digest(self, tool: str, request: int, text: str) -> str | None:
        """The text to digest in place of ``text`` for ``tool``'s answer to ``request``,
        learning from it first; None: digest ``text`` as it is.

        A tool is learned when its identical request got a text that differs from the
        previous answer only in opaque tokens: that answer is then the previous one (its
        text is returned, so the two digests are equal), and every later plain-text answer
        of the tool is digested masked."""
        if tool in self.learned:
            return mask_opaque(text)
        table = self._last
        last = table.get(tool)
        if last is None and len(table) >= _MAX_TOOLS:
            table.pop(next(iter(table)))
        table[tool] = (request, text)
        if last is None or last[0] != request or last[1] == text:
            return None
        previous = last[1]
        if len(previous) > _MAX_TEXT or text.count("\n") != previous.count("\n"):
            return None  # (opaque and volatile tokens hold no line break)
        masked = mask_opaque(text)
        if masked != text and masked == mask_opaque(previous):
            if len(self.learned) < _MAX_TOOLS:
                self.learned.add(tool)
            return previous
        volatile = self._volatile
        if volatile is not None and volatile(text) == volatile(previous):
            table[tool] = (request, previous)  # (the first wording stays the reference)
            return previous
        return None
