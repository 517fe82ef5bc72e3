"""Answers at one location, compared as looks at one thing (issue 15, patterns 1 and 2).

A browser agent that clicks the same link five times, or comes back to a page through
another link or a reworded search, gets a new text every time: a model transcribes the
page afresh, usernames are spelled three ways, "7 minutes ago" moves, bullets are laid
out again, an advert rotates. No two answers are byte-equal, yet none says anything new.
:class:`Views` remembers, per run, what was said at each location
(:mod:`otel_progress.evidence.location`) and judges each new answer there against **every**
earlier answer at that location, not only the tool's last one:

* **Exact first.** An answer byte-equal (after the engine's canonical form) to one seen
  at the location is that answer.
* **A view** (a text that names its location at its head, see
  :class:`~otel_progress.evidence.location.Location`) is compared by its words. Its sketch, taken
  once per answer and only when the location has another answer to compare it with, is
  the set of its content words (letters only, three or more, lower-cased, function words
  and opaque tokens left out), its numbers, and the same per line, leaving out short
  layout headings (a line ending in ``:``). A word counts as said at the location when
  it was, or differs from one that was by a single letter added, dropped or changed (a
  mis-transcription). The answer is **the same** as what the location already showed
  when (1) fewer of its words are new than were said there already, and (2) no line of
  it is mostly new: a line whose new words are at least as many as its known ones is new
  content (a panel that opened, a status that changed, a log line, a new search hit).
  Numbers count only when the request is the one that produced the location's last
  answer (a poll: there a moved counter is progress, as seed 000 says); reached by any
  other request, a ticking counter or a relative time is not news.
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

Cost: an answer is read once (its words and token set, from one split of its UTF-8
bytes), and only when there is something to compare it with; the comparison takes each
step only when the cheaper ones before cannot decide: the count of new words, then only
the lines holding two new words or more (found by searching the text for the new
words), and the one-letter-off look only for the words of such a line that could still
change its verdict, among the location's words of the same length.

Memory is bounded: 32 locations per run (the oldest forgotten), 4,096 words and 64
answer digests per location, the first 16 KB of each answer sketched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from itertools import chain, groupby
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
        words = {t for t in tokens if t.isalpha()}
        words -= _IGNORED
        self.words = words
        self._numbers: set[bytes] | None = None

    @property
    def numbers(self) -> set[bytes]:
        numbers = self._numbers
        if numbers is None:
            numbers = self._numbers = {t for t in self.tokens if t.isdigit()}
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
    """What one location showed: its words (and, once a word is first looked up one letter
    off, the same words joined per length), numbers, answer digests, its representative
    and the request of its last answer."""

    __slots__ = ("_by_length", "_numbers", "_unjoined", "digests", "pending", "representative", "request",
                 "unnumbered", "words")

    def __init__(self, representative: int, request: int) -> None:
        self.words: set[bytes] = set()
        self._numbers: set[bytes] = set()
        self.unnumbered: list[Sketch] = []  # answers whose numbers are not merged yet
        # per word length: b"\n" + the words of that length joined by b"\n" + b"\n" (made
        # when a word is first looked up one letter off; the words added since then wait
        # in _unjoined)
        self._by_length: dict[int, bytes] | None = None
        self._unjoined: list[set[bytes]] = []  # (the words added since, to join)
        self.digests: set[int] = {representative}
        self.representative = representative
        self.request = request
        self.pending: str | None = None  # a view's first text, sketched when one is compared

    def add(self, sk: Sketch) -> None:
        words = self.words
        if len(words) < _MAX_WORDS and not sk.words <= words:
            if self._by_length is not None:
                self._unjoined.append(sk.words - words)
            words |= sk.words
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

    def _joined(self) -> dict[int, bytes]:
        """The words joined per length (see ``_by_length``), up to date."""
        by_length = self._by_length
        if by_length is None:
            by_length = self._by_length = {}
            self._unjoined = [self.words]
        if self._unjoined:
            for n, group in groupby(sorted(chain.from_iterable(self._unjoined), key=len), len):
                by_length[n] = by_length.get(n, b"\n") + b"\n".join(group) + b"\n"
            self._unjoined = []
        return by_length

    def near(self, word: bytes) -> bool:
        """Whether a word not said here differs from one that was by one letter added,
        dropped or changed (a mis-transcription). A word one letter off another keeps one
        of its halves: the words of each length sharing a half are found by searching the
        words of that length, joined."""
        n = len(word)
        if n < _FUZZY_MIN:
            return False
        by_length = self._joined()
        for m in (n - 1, n, n + 1):
            joined = by_length.get(m)
            if joined is None:
                continue
            h = m // 2
            head = b"\n" + word[:h]
            at = joined.find(head)
            while at >= 0:
                if _one_edit(word, joined[at + 1:at + 1 + m]):
                    return True
                at = joined.find(head, at + 1 + m)
            tail = word[n - (m - h):] + b"\n"
            at = joined.find(tail)
            while at >= 0:
                end = at + len(tail) - 1
                if _one_edit(word, joined[end - m:end]):
                    return True
                at = joined.find(tail, end + 1)
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


_NONE: frozenset[bytes] = frozenset()


def _same(place: _Place, sk: Sketch, poll: bool, fuzzy: bool = True) -> bool:
    """Whether an answer's sketch shows nothing new at ``place`` (see the module docstring);
    ``fuzzy``: a word one letter off a known one counts as known (a transcription). Each
    step is taken only when the ones before cannot decide: the share of new words, then
    the lines holding two new words or more (found by searching the text for the new
    words), each judged by :func:`_new_line`."""
    new = sk.words - place.words
    new_numbers = (sk.numbers - place.numbers) if poll else _NONE
    fresh = len(new) + len(new_numbers)
    if not fresh:
        return True
    total = len(sk.words) + (len(sk.numbers) if poll else 0)
    if fresh >= total - fresh:
        return False  # more of it is new than was said here already
    news = (new | new_numbers) if poll else new
    text = sk.text
    seen: set[int] = set()  # the starts of the lines looked at
    for token in news:
        at = text.find(token)
        while at >= 0:
            start = text.rfind(b"\n", 0, at) + 1
            end = text.find(b"\n", at)
            if end < 0:
                end = len(text)
            if start not in seen:
                seen.add(start)
                line = text[start:end]
                tokens = line.split()
                if len(news.intersection(tokens)) >= _LINE_MIN_NEW and _new_line(
                        place, line, sk.raw[start:end], tokens, new, new_numbers, poll, fuzzy):
                    return False
            at = text.find(token, end)
    return True


def _new_line(place: _Place, body: bytes, raw: bytes, tokens: list[bytes], new: AbstractSet[bytes],
              new_numbers: AbstractSet[bytes], poll: bool, fuzzy: bool) -> bool:
    """Whether one line (``body``: as tokens, ``raw``: as written) is new content at
    ``place``: not a short layout heading, and (for a long line, each of its sentences
    apart) with at least two new words or numbers and no fewer than the known ones. A
    word one letter off a known one is looked up only while the count is undecided."""
    if len(tokens) <= _HEADING_MAX and _COLON.search(raw):
        return False  # a layout heading ("Top Bar:", "Here is the text of the page:")
    for part in (_split_long(body, raw) if len(tokens) > _LONG_LINE else (tokens,)):
        distinct = set(part)
        content = {t for t in distinct if t.isalpha()}
        # n new against k known: new content when n >= 2 and n >= k, that is 2n >= n + k,
        # where n counts its unknown words (less those one letter off a known word) and, in
        # a poll, its new numbers, and n + k all its words and, in a poll, all its other
        # tokens (numbers, and mixed tokens: pieces of identifiers, noise, not news)
        size = len(distinct) - len(content) if poll else 0
        content -= _IGNORED
        size += len(content)
        unknown = content & new
        n = len(unknown)
        if poll:
            n += len({t for t in distinct if t.isdigit()} & new_numbers)
        if n < _LINE_MIN_NEW or 2 * n < size:
            continue  # (not new content even before a word is found one letter off)
        if fuzzy and len(unknown) >= _LINE_MIN_NEW:
            left = len(unknown)
            for w in unknown:
                if n - left >= _LINE_MIN_NEW and 2 * (n - left) >= size:
                    break  # new content whatever the words left are
                left -= 1
                if place.near(w):
                    n -= 1
                    if n < _LINE_MIN_NEW or 2 * n < size:
                        break  # not new content whatever the words left are
        if n >= _LINE_MIN_NEW and 2 * n >= size:
            return True
    return False


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
