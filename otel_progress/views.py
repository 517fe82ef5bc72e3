"""Answers at one location, compared as looks at one thing (issue 15, patterns 1 and 2).

A browser agent that clicks the same link five times, or comes back to a page through
another link or a reworded search, gets a new text every time: a model transcribes the
page afresh, usernames are spelled three ways, "7 minutes ago" moves, bullets are laid
out again, an advert rotates. No two answers are byte-equal, yet none says anything new.
:class:`Views` remembers, per run, what was said at each location
(:mod:`otel_progress.location`) and judges each new answer there against **every**
earlier answer at that location, not only the tool's last one:

* **Exact first.** An answer byte-equal (after the engine's canonical form) to one seen
  at the location is that answer.
* **A view** (a text that names its location at its head, see
  :class:`~otel_progress.location.Location`) is compared by its words. Its sketch, taken
  once per answer and only when the location has another answer to compare it with, is
  the set of its content words (letters only, three or more, lower-cased, function words
  and opaque tokens left out), its numbers, and the same per line, leaving out short
  layout headings (a line ending in ``:``). A word counts as said at the location when
  it was, or differs from one that was by a single letter added, dropped or changed (a
  mis-transcription), or when the run's answers used it at two or more other locations
  (the transcriber's own vocabulary, a site's navigation: it tells nothing about this
  place). The answer is **the same** as what the location already showed when (1) fewer
  of its words are new than were said there already, and (2) no line of it is mostly
  new: a line whose new words are at least as many as its known ones is new content (a
  panel that opened, a status that changed, a log line, a new search hit). Numbers count
  only when the request is the one that produced the location's last answer (a poll:
  there a moved counter is progress, as seed 000 says); reached by any other request, a
  ticking counter or a relative time is not news.
* **Anything else at a location** (a JSON record, a file named by the request) is
  compared byte for byte: a one-line edit of a file is new.

An answer judged the same is given the digest of what the location showed (its
**representative**), so every signal sees a repeat: the turn key of the repeat and
frequency checks, the evidence of the no-progress counter and the state signature. Each
location's content has a **state** (location and representative) that the location
revisit signal follows.

Why this is safe: only answers at one location are ever compared (two pages are never
one because they look alike), a command's output is never a view, and the test errs
towards "new": any line that is mostly new words makes the answer new, and a majority
of new words does too. The cost of a wrong "same" is bounded by the signals' own
thresholds (a repeat of the identical request, four steps with nothing new, three
revisits); the cost of a wrong "new" is a loop seen later.

Memory is bounded: 32 locations per run (the oldest forgotten), 4,096 words and 64
answer digests per location, the first 16 KB of each answer sketched.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable
from itertools import accumulate
from typing import Any

from .location import Location

__all__ = ["Sketch", "Views", "only_repeats"]

_MAX_PLACES = 32
_MAX_WORDS = 4096
_MAX_DIGESTS = 64
_MAX_SKETCH = 16384
_MAX_HEAD_LINE = 3000  # a view's first line (its location) is skipped up to this length
_FUZZY_MIN = 5  # shorter words must match exactly (one letter off is another word)
_PROSE_MIN_WORDS = 6  # as content.same_prose: fewer content words make a fact, not prose
_LINE_MIN_NEW = 2  # new words that make a line new content (with as many as it has known)
_HEADING_MAX = 6  # words of a layout heading ("Top Bar:", "Here is the text of the page:")
_LONG_LINE = 40  # words: a longer line is judged sentence by sentence
_MASK = (1 << 63) - 1

# Words are found with byte operations (cheap): the text's UTF-8 bytes, lower-cased, every
# byte that is not a letter or a digit made a space (line ends kept), split. A token of
# letters only is a word, of digits only a number; one that mixes them (a fragment of an
# opaque token: a base64 blob, a request id) is neither.
_TOKENS = bytes(c if (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c >= 128 or c == 10) else 32
                for c in range(256))
_SHORT = frozenset({bytes([a]) for a in range(97, 123)} | {bytes([a, b]) for a in range(97, 123)
                                                            for b in range(97, 123)})
_COLON = re.compile(rb":[ \t\r]*$")
_SENTENCE_END = re.compile(rb"[.!?]\s+")
#: English function words: re-wording changes them freely.
FUNCTION_WORDS: frozenset[str] = frozenset((
    "the", "this", "that", "these", "those", "are", "was", "were", "been", "being", "its", "you",
    "your", "yours", "our", "ours", "they", "their", "there", "here", "she", "his", "her", "him",
    "hers", "for", "from", "with", "and", "but", "not", "nor", "into", "onto", "over", "under", "about",
    "above", "below", "out", "off", "all", "any", "both", "each", "few", "more", "most", "other",
    "some", "such", "than", "too", "very", "also", "just", "only", "still", "again", "then", "has",
    "have", "had", "will", "would", "can", "could", "should", "may", "might", "must", "shall", "which",
    "who", "whom", "what", "when", "where", "why", "how", "does", "did", "done", "yet", "now", "one",
    "let", "lets", "get", "got", "via", "per", "use", "using", "sure"
))
#: Words that describe how a view is laid out rather than what it says: a transcriber
#: names the parts of a page in its own words, differently on every look.
LAYOUT_WORDS: frozenset[str] = frozenset((
    "page", "pages", "screen", "screenshot", "viewport", "visible", "text", "texts", "transcription",
    "transcribed", "transcribe", "following", "shown", "shows", "displayed", "display", "displays",
    "labeled", "labelled", "label", "labels", "element", "elements", "header", "headers", "heading",
    "headings", "subheader", "subheading", "footer", "sidebar", "side", "panel", "panels", "section",
    "sections", "top", "bottom", "left", "right", "upper", "lower", "middle", "center", "centre",
    "main", "content", "area", "box", "boxes", "tab", "tabs", "button", "buttons", "icon", "icons",
    "menu", "menus", "bar", "bars", "toolbar", "navigation", "nav", "link", "links", "field", "fields",
    "input", "inputs", "dropdown", "drop", "down", "arrow", "arrows", "placeholder", "banner", "logo",
    "image", "images", "picture", "column", "columns", "row", "rows", "table", "tables", "list",
    "lists", "item", "items", "bullet", "bullets", "paragraph", "paragraphs", "line", "lines", "option",
    "options", "selected", "checkbox", "toggle", "search", "ui", "interface", "layout", "region",
    "part", "parts"
))


_IGNORED = frozenset(w.encode() for w in FUNCTION_WORDS | LAYOUT_WORDS) | _SHORT


class Sketch:
    """One answer as compared: its content words, its numbers (taken when first asked
    for: only a poll compares them), and its text (as tokens, line by line), whose lines
    are read only when a line can decide."""

    __slots__ = ("_numbers", "raw", "text", "tokens", "words")

    def __init__(self, text: str, view: bool = False) -> None:
        if view:  # a view's first line names the location (its URL, title, position): not content
            cut = text.find("\n", 0, _MAX_HEAD_LINE)
            text = text[cut + 1:] if cut >= 0 else text
        raw = text[:_MAX_SKETCH].encode("utf-8", "ignore").lower()
        body = raw.translate(_TOKENS)
        tokens = set(body.split())
        self.text = body
        self.raw = raw  # byte for byte aligned with ``text`` (to tell a layout heading)
        self.tokens = tokens
        self.words = set(filter(bytes.isalpha, tokens)) - _IGNORED
        self._numbers: set[bytes] | None = None

    @property
    def numbers(self) -> set[bytes]:
        numbers = self._numbers
        if numbers is None:
            numbers = self._numbers = set(filter(bytes.isdigit, self.tokens))
        return numbers


def _one_edit(a: bytes, b: bytes) -> bool:
    """Whether two different words differ by one letter added, dropped or changed."""
    if len(a) > len(b):
        a, b = b, a
    if len(b) - len(a) > 1:
        return False
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) == len(b):
        return a[i + 1:] == b[i + 1:]
    return a[i:] == b[i + 1:]


class _Place:
    """What one location showed: its words (joined in one text when a word is first
    looked up one letter off), numbers, answer digests, its representative and the
    request of its last answer."""

    __slots__ = ("_joined", "_numbers", "digests", "pending", "representative", "request", "unnumbered", "words")

    def __init__(self, representative: int, request: int) -> None:
        self.words: set[bytes] = set()
        self._numbers: set[bytes] = set()
        self.unnumbered: list[Sketch] = []  # answers whose numbers are not merged yet
        self._joined: bytes | None = None  # b"\n" + the words joined by b"\n" + b"\n"
        self.digests: set[int] = {representative}
        self.representative = representative
        self.request = request
        self.pending: str | None = None  # a view's first text, sketched when one is compared

    def add(self, sk: Sketch) -> None:
        words = self.words
        if len(words) < _MAX_WORDS and not sk.words <= words:
            words |= sk.words
            self._joined = None
        if len(self.unnumbered) < _MAX_DIGESTS:
            self.unnumbered.append(sk)

    @property
    def numbers(self) -> set[bytes]:
        """The numbers shown here (merged when first asked for: only a poll needs them)."""
        if self.unnumbered:
            for sk in self.unnumbered:
                self._numbers |= sk.numbers
            self.unnumbered.clear()
        return self._numbers

    def near(self, word: bytes) -> bool:
        """Whether a word not said here differs from one that was by one letter added,
        dropped or changed (a mis-transcription). A word one letter off another keeps one
        of its halves: the words sharing a half are found by searching the joined words."""
        n = len(word)
        if n < _FUZZY_MIN:
            return False
        joined = self._joined
        if joined is None:
            joined = self._joined = b"\n" + b"\n".join(self.words) + b"\n"
        for m in (n - 1, n, n + 1):
            h = m // 2
            head = b"\n" + word[:h]
            at = joined.find(head)
            while at >= 0:
                end = joined.find(b"\n", at + 1)
                if end - at - 1 == m and _one_edit(word, joined[at + 1:end]):
                    return True
                at = joined.find(head, at + 1)
            tail = word[n - (m - h):] + b"\n"
            at = joined.find(tail)
            while at >= 0:
                end = at + len(tail) - 1
                start = joined.rfind(b"\n", 0, at) + 1
                if end - start == m and _one_edit(word, joined[start:end]):
                    return True
                at = joined.find(tail, at + 1)
        return False


class Views:
    """One run's memory of what each location showed (bounded: see the module docstring)."""

    __slots__ = ("_places",)

    def __init__(self) -> None:
        self._places: dict[tuple[str, str], _Place] = {}

    def observe(self, location: Location, request: int, parsed: Any, digest: int) -> tuple[int, int]:
        """Note an answer at ``location`` (``digest``: its canonical digest; ``request``:
        the request's digest); returns the digest the answer stands for (its own, or the
        location's representative when it is a view that shows nothing new there) and the
        location's state (location and that digest)."""
        key = location.key
        if not location.view or type(parsed) is not str:
            return digest, _state(key, digest)  # compared byte for byte: nothing to remember
        places = self._places
        place = places.get(key)
        if place is None:
            if len(places) >= _MAX_PLACES:
                places.pop(next(iter(places)))
            place = places[key] = _Place(digest, request)
            place.pending = parsed
            return digest, _state(key, digest)
        poll = request == place.request
        place.request = request
        if digest in place.digests:
            return digest, _state(key, digest)  # byte-equal to an earlier answer here
        if place.pending is not None:
            place.add(Sketch(place.pending, view=True))
            place.pending = None
        sk = Sketch(parsed, view=True)
        same = _same(place, sk, poll)
        place.add(sk)
        if same:
            return place.representative, _state(key, place.representative)
        if len(place.digests) < _MAX_DIGESTS:
            place.digests.add(digest)
        place.representative = digest
        return digest, _state(key, digest)

def _same(place: _Place, sk: Sketch, poll: bool, fuzzy: bool = True) -> bool:
    """Whether an answer's sketch shows nothing new at ``place`` (see the module docstring);
    ``fuzzy``: a word one letter off a known one counts as known (a transcription). That
    look is the costly part, so it is taken only for the words that would decide: those
    of a line that would otherwise be new content."""
    new = sk.words - place.words
    new_numbers = (sk.numbers - place.numbers) if poll else set()
    total = len(sk.words) + (len(sk.numbers) if poll else 0)
    if not new and not new_numbers:
        return True
    fresh = len(new) + len(new_numbers)
    if not fresh:
        return True
    if fresh >= total - fresh:
        return False  # more of it is new than was said here already
    # The lines holding a new word or number, found by searching the text for them.
    text = sk.text
    body_lines = text.split(b"\n")
    ends = list(accumulate(len(line) + 1 for line in body_lines))  # where each line ends
    lines: set[int] = set()
    for token in new | new_numbers:
        at = text.find(token)
        while at >= 0:
            lines.add(bisect_right(ends, at))
            at = text.find(token, at + len(token))
    if not lines:
        return True
    raw = sk.raw
    for i in sorted(lines):
        tokens = body_lines[i].split()
        end = ends[i] - 1
        raw_line = raw[end - len(body_lines[i]):end]  # (the text is byte for byte aligned with it)
        if len(tokens) <= _HEADING_MAX and _COLON.search(raw_line):
            continue  # a layout heading ("Top Bar:", "Here is the text of the page:")
        for part in (_split_long(body_lines[i], raw_line) if len(tokens) > _LONG_LINE else (tokens,)):
            distinct = set(part)
            content = set(filter(bytes.isalpha, distinct)) - _IGNORED
            unknown = content & new
            if fuzzy and len(unknown) >= _LINE_MIN_NEW:
                unknown = {w for w in unknown if not place.near(w)}
            n = len(unknown)
            k = len(content) - n
            if poll:
                numbers = set(filter(bytes.isdigit, distinct))
                m = len(numbers & new_numbers)
                # (a token of letters and digits is a piece of an identifier: noise, not news)
                mixed = len(distinct) - len(numbers) - sum(1 for t in distinct if t.isalpha())
                n += m
                k += len(numbers) - m + mixed
            if n >= _LINE_MIN_NEW and n >= k:
                return False  # a line of new content
    return True


def _split_long(body: bytes, raw: bytes) -> list[list[bytes]]:
    """A long line's sentences (at ``. ``, ``! ``, ``? `` in the raw text), as tokens."""
    parts, start = [], 0
    for m in _SENTENCE_END.finditer(raw):
        parts.append(body[start:m.end()].split())
        start = m.end()
    parts.append(body[start:].split())
    return parts


def only_repeats(sk: Sketch, earlier: Iterable[Sketch]) -> bool:
    """Whether an answer (its sketch) says nothing that the ``earlier`` answers did not:
    it is prose (six content words or more: a shorter answer is a fact, compared
    exactly) and, judged as a view of what they showed, with its numbers counted and
    its words matched exactly (the answers of one run are not transcriptions of each
    other), shows nothing new. The no-progress counter asks it of an answer that
    interrupts a streak of nothing new."""
    if len(sk.words) < _PROSE_MIN_WORDS:
        return False
    place = _Place(0, 0)
    for old in earlier:
        place.add(old)
    return _same(place, sk, True, fuzzy=False)


def _state(key: tuple[str, str], representative: int) -> int:
    return hash((key, representative)) & _MASK
