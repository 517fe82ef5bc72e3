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
from collections.abc import Callable, Iterable
from typing import Any

from .location import Location
from .opaque import mask_opaque

__all__ = ["Sketch", "Views", "only_repeats", "sketch"]

_MAX_PLACES = 32
_MAX_WORDS = 4096
_MAX_DIGESTS = 64
_MAX_SKETCH = 16384
_FUZZY_MIN = 5  # shorter words must match exactly (one letter off is another word)
_PROSE_MIN_WORDS = 6  # as content.same_prose: fewer content words make a fact, not prose
_MASK = (1 << 63) - 1

_WORD = re.compile(r"[^\W\d_]{3,}", re.UNICODE)
_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[\"'])")
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


class Sketch:
    """The words of one answer, overall and per content line."""

    __slots__ = ("lines", "numbers", "words")

    def __init__(self, words: frozenset[str], numbers: frozenset[str],
                 lines: tuple[tuple[frozenset[str], frozenset[str]], ...]) -> None:
        self.words = words
        self.numbers = numbers
        self.lines = lines


def sketch(text: str) -> Sketch:
    """The sketch of a view's text (see the module docstring)."""
    body = mask_opaque(text[:_MAX_SKETCH])
    lines: list[tuple[frozenset[str], frozenset[str]]] = []
    all_words: set[str] = set()
    all_numbers: set[str] = set()
    for raw in body.splitlines():
        for part in (_SENTENCE.split(raw) if len(raw) > 200 else (raw,)):
            part = part.strip()
            if not part:
                continue
            found = _WORD.findall(part)
            words = frozenset(w for w in (x.lower() for x in found) if w not in FUNCTION_WORDS
                              and w not in LAYOUT_WORDS)
            if part.endswith(":") and len(found) <= 6:
                continue  # a layout heading ("Top Bar:", "Here is the text of the page:")
            numbers = frozenset(_NUMBER.findall(part)) if any(c.isdigit() for c in part) else frozenset()
            if words or numbers:
                lines.append((words, numbers))
                all_words |= words
                all_numbers |= numbers
    return Sketch(frozenset(all_words), frozenset(all_numbers), tuple(lines))


def _deletions(word: str) -> set[str]:
    return {word[:i] + word[i + 1:] for i in range(len(word))}


class _Place:
    """What one location showed: its words (and their one-letter-off forms), numbers,
    answer digests, its representative and the request of its last answer."""

    __slots__ = ("digests", "number_set", "pending", "representative", "request", "variants", "words")

    def __init__(self, representative: int, request: int) -> None:
        self.words: set[str] = set()
        self.variants: set[str] = set()
        self.number_set: set[str] = set()
        self.digests: set[int] = {representative}
        self.representative = representative
        self.request = request
        self.pending: str | None = None  # a view's first text, sketched when one is compared

    def add(self, sk: Sketch) -> None:
        words = self.words
        if len(words) < _MAX_WORDS:
            variants = self.variants
            for w in sk.words - words:
                words.add(w)
                if len(w) >= _FUZZY_MIN:
                    variants |= _deletions(w)
        self.number_set |= sk.numbers

    def knows(self, word: str) -> bool:
        if word in self.words:
            return True
        if len(word) < _FUZZY_MIN:
            return False
        variants = self.variants
        if word in variants:
            return True  # one letter dropped
        words = self.words
        return any(v in words or v in variants for v in _deletions(word))


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
            place.add(sketch(place.pending))
            place.pending = None
        sk = sketch(parsed)
        same = _same(place, sk, poll)
        place.add(sk)
        if same:
            return place.representative, _state(key, place.representative)
        if len(place.digests) < _MAX_DIGESTS:
            place.digests.add(digest)
        place.representative = digest
        return digest, _state(key, digest)

LINE_MIN_NEW = 2


def _same(place: _Place, sk: Sketch, poll: bool) -> bool:
    """Whether an answer's sketch shows nothing new at ``place`` (see the module docstring)."""
    known: Callable[[str], bool] = place.knows
    numbers = place.number_set
    new = old = 0
    for w in sk.words:
        if known(w):
            old += 1
        else:
            new += 1
    if poll:
        for x in sk.numbers:
            if x in numbers:
                old += 1
            else:
                new += 1
    if not new:
        return True
    if new >= old:
        return False  # more of it is new than was said here already
    for words, nums in sk.lines:
        n = k = 0
        for w in words:
            if known(w):
                k += 1
            else:
                n += 1
        if poll:
            for x in nums:
                if x in numbers:
                    k += 1
                else:
                    n += 1
        if n >= LINE_MIN_NEW and n >= k:
            return False  # a line of new content
    return True


def only_repeats(text: str, earlier: Iterable[str]) -> bool:
    """Whether a text says nothing that the ``earlier`` texts did not: it is prose (six
    content words or more: a shorter answer is a fact, compared exactly) and, judged as a
    view of what they showed with its numbers counted, shows nothing new. The no-progress
    counter asks it of an answer that interrupts a streak of nothing new."""
    sk = sketch(text)
    if len(sk.words) < _PROSE_MIN_WORDS:
        return False
    place = _Place(0, 0)
    for old in earlier:
        place.add(sketch(old))
    return _same(place, sk, True)


def _state(key: tuple[str, str], representative: int) -> int:
    return hash((key, representative)) & _MASK
