"""What a request or a result says, beyond its digest.

The signals compare digests; this module answers the questions a digest cannot:

* :func:`is_empty`: the result carries nothing (no text, no items, only zeros) or says
  that nothing was found (``0 results``, ``Could not find X. Similar: …``), and
  :func:`is_silent`: it carries no text at all (a command that printed nothing). The
  two differ: "nothing found" is evidence that a search failed, silence after a command
  is not evidence of anything.
* :func:`is_ack`: the result only acknowledges that a request was carried out.
* :func:`command_of`: the command a call sends, when its arguments have the shape of a
  command-taking tool (a ``command``/``cmd``/``keys``/``script``-like string argument),
  whatever the tool is called; :func:`is_deliberate_wait`: the command waits on purpose
  (``sleep 5 && cat log``).
* :func:`may_be_waiting`: a raw JSON result may carry a waiting status (then it is
  parsed for the implicit wait check rather than digested as received).
* :func:`same_prose`: two results of one request differ only in wording (a model's
  transcription of the same page), not in any fact-like token or line.
* :class:`ResultMemory`: what one run remembers for these questions: the commands it
  sent, each tool's last answer (to recognise a reworded one), and the fields of a
  tool's results whose values are new opaque tokens on every call while the rest of the
  result repeats (a ``query_id``, a response ``id``): learned, and stripped from then on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "COMMAND_KEYS",
    "ResultMemory",
    "command_of",
    "content_words",
    "echoes_request",
    "has_opaque",
    "is_ack",
    "is_deliberate_wait",
    "is_empty",
    "is_silent",
    "may_be_waiting",
    "opaque_fields",
    "same_prose",
    "says_nothing_found",
    "without",
]

_EMPTY_TEXT = re.compile(
    r"^(?:(?:0|no|zero|none)\s+(?:results?|matches|hits|items|documents|docs|records|rows|entries|files)"
    r"(?:\s+found)?|no\s+results?\s+found|nothing\s+found|not\s+found|none|null|\[\]|\{\})\.?$",
    re.IGNORECASE,
)
# The first sentence of a result that reports an absence: "Could not find 'x'. Similar: …",
# "No results for …", "No matching documents". What follows it (suggestions, hints) is
# incidental: the request found nothing.
_NOTHING_FOUND = re.compile(
    r"^(?:error:\s*)?(?:(?:could\s*not|couldn't|cannot|can't|unable\s+to|did\s+not|didn't)\s+(?:find|locate|match)\b"
    r"|no\s+(?:results?|matches|matching\s+\w+|hits|items|documents|records|entries)\b"
    r"|(?:0|zero)\s+(?:results?|matches|hits|items|documents|records|entries)\b"
    r"|nothing\s+(?:was\s+)?(?:found|matched)\b)",
    re.IGNORECASE,
)
_NOTHING_FOUND_MAX = 600  # longer results carry more than a report of absence
# ... or whose short first sentence says the thing asked for is absent: "Skill 'x' not
# found. Available: …", "Error: file does not exist", "404 Not Found".
_ABSENT = re.compile(r"\b(?:not\s+found|does\s+not\s+exist|doesn't\s+exist|no\s+such)\b", re.IGNORECASE)
_FIRST_SENTENCE = re.compile(r"(.{1,100}?)(?:[.!?](?=\s|$)|$)", re.MULTILINE)

_ACK_TEXT = re.compile(
    r"^(?:ok|okay|done|success|succeeded|saved|updated|written|applied|created|deleted|modified|true"
    r"|successfully\b[^\n]{0,200}|(?:file|changes?)\s+(?:saved|written|updated|applied)[^\n]{0,120})\.?$",
    re.IGNORECASE,
)
_ACK_KEYS = frozenset({"ok", "success", "status", "result", "message", "updated", "written", "applied"})

#: Argument names (case, ``_`` and ``-`` ignored) whose string value is a command for a
#: shell, a terminal or an interpreter: a call carrying one is a command, which may change
#: the world whatever it prints.
COMMAND_KEYS: frozenset[str] = frozenset({
    "command", "commands", "cmd", "keystrokes", "keys", "script", "code", "shell", "bash",
    "bashcommand", "fullcommand",
})
_SLEEP = re.compile(r"(?:^|[;&|(\s])(?:sleep\s+\d+(?:\.\d+)?[smh]?|timeout\s+\d+\s+tail\b)")


def says_nothing_found(text: str) -> bool:
    """Whether a plain-text result (up to 600 characters) opens by saying that nothing
    was found: its start (``No results``, ``Could not find``, ``0 matches``) or its short
    first sentence (``Skill 'x' not found.``, ``… does not exist``, ``No such …``)."""
    if len(text) > _NOTHING_FOUND_MAX:
        return False
    text = text.lstrip()
    if _NOTHING_FOUND.match(text):
        return True
    first = _FIRST_SENTENCE.match(text)
    return first is not None and bool(_ABSENT.search(first.group(1)))


def is_silent(value: Any) -> bool:
    """Whether a parsed result has no text at all (``None``, ``""``, whitespace)."""
    return value is None or (isinstance(value, str) and not value.strip())


def is_empty(value: Any, depth: int = 0) -> bool:
    """Whether a parsed result carries nothing: no text, no items, only zeros, or a text
    that says nothing was found."""
    if value is None or value is False:
        return True
    if isinstance(value, str):
        text = value.strip()
        return not text or bool(_EMPTY_TEXT.match(text)) or says_nothing_found(text)
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value == 0
    if depth > 4:
        return False
    if isinstance(value, Mapping):
        return all(is_empty(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(is_empty(v, depth + 1) for v in value)
    return False


def is_ack(value: Any) -> bool:
    """Whether a parsed result only acknowledges that a request was carried out."""
    if value is True:
        return True
    if isinstance(value, str):
        return len(value) <= 300 and bool(_ACK_TEXT.match(value.strip()))
    if isinstance(value, Mapping) and 0 < len(value) <= 3 and set(value) <= _ACK_KEYS:
        return all(v is True or (isinstance(v, (str, int)) and is_ack(str(v))) or v in (1, 200, 201, 204)
                   for v in value.values())
    return False


def _norm_key(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


_COMMAND_KEY_CACHE: dict[str, bool] = {}


def _is_command_key(key: str) -> bool:
    hit = _COMMAND_KEY_CACHE.get(key)
    if hit is None:
        hit = _norm_key(key) in COMMAND_KEYS
        if len(_COMMAND_KEY_CACHE) < 4096:
            _COMMAND_KEY_CACHE[key] = hit
    return hit


def command_of(args: Any) -> str | None:
    """The command a call sends: the non-empty string (or list of strings, joined) under
    a command-like argument name (:data:`COMMAND_KEYS`), else None. Judged from the
    arguments' shape only, never from the tool's name."""
    if not isinstance(args, Mapping) or not args or len(args) > 8:
        return None
    cache = _COMMAND_KEY_CACHE
    for key in args:
        hit = cache.get(key) if type(key) is str else False
        if hit is None:
            hit = _is_command_key(key)
        if hit:
            value = args[key]
            if isinstance(value, str) and value.strip():
                return value
            if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
                return "\n".join(value)
    return None


def echoes_request(args: Any, result: Any) -> bool:
    """Whether a successful call's answer is the echo of a write rather than something the
    world said: the request carries content of its own (an argument other than the
    command that holds a line break or 40+ characters, as a file's text or a patch does)
    or its answer repeats an argument's text (an editor showing the lines it just wrote).
    Judged from the request's shape, never from the tool's name."""
    if not isinstance(args, Mapping) or not args or len(args) > 16:
        return False
    text = result if isinstance(result, str) else None
    cache = _COMMAND_KEY_CACHE
    for key, value in args.items():
        if not isinstance(value, str) or not value:
            continue
        hit = cache.get(key) if type(key) is str else False
        if hit is None:
            hit = _is_command_key(key)
        if hit:
            continue
        if "\n" in value or len(value) >= 40:
            return True
        if text is not None and " " in value:
            needle = value.strip()
            if len(needle) >= 4 and needle in text:
                return True
    return False


def is_deliberate_wait(command: str) -> bool:
    """Whether a command waits on purpose (``sleep 5 && cat log``, ``sleep 30; tail
    out``): a re-check after a deliberate pause is a poll, not a repeat."""
    return "sleep" in command and bool(_SLEEP.search(command))


# -- waiting statuses in raw JSON -------------------------------------------------------------

def _status_value(text: str, at: int) -> str:
    """The value after a status marker ending at ``at``, as ``may_be_waiting`` compares it:
    up to 48 characters, separators and the opening quote skipped, up to the closing
    quote, stripped and lower-cased."""
    value = text[at: at + 48].lstrip(' :\t\n"')
    end = value.find('"')
    return value[:end if end >= 0 else len(value)].strip().lower()


def may_be_waiting(text: str, waiting: frozenset[str]) -> bool:
    """Whether a raw JSON result has a ``status``/``state``/``phase`` field whose value
    is one of ``waiting`` (then it must be parsed, for the implicit wait check).

    Each occurrence of ``"status"``, ``"state"`` and ``"phase"`` is checked. The first
    two both begin with ``"stat``, so one scan of the text finds the occurrences of
    both (a long result is scanned twice, not three or four times)."""
    i = text.find('"stat')
    while i >= 0:
        if text.startswith('"status"', i):
            if _status_value(text, i + 8) in waiting:
                return True
        elif text.startswith('"state"', i) and _status_value(text, i + 7) in waiting:
            return True
        i = text.find('"stat', i + 1)
    i = text.find('"phase"')
    while i >= 0:
        if _status_value(text, i + 7) in waiting:
            return True
        i = text.find('"phase"', i + 1)
    return False


# -- wording ------------------------------------------------------------------------------

_WORD = re.compile(r"[^\W\d_]{3,}", re.UNICODE)
#: English function words: rewording changes them freely, so only the other (content)
#: words are compared.
_FUNCTION_WORDS = frozenset((
    "the", "this", "that", "these", "those", "are", "was", "were", "been", "being", "its",
    "you", "your", "our", "they", "their", "there", "here", "she", "his", "her", "him", "hers",
    "for", "from", "with", "and", "but", "not", "nor", "into", "onto", "over", "under", "about",
    "above", "below", "out", "off", "all", "any", "both", "each", "few", "more", "most",
    "other", "some", "such", "than", "too", "very", "also", "just", "only", "still", "again",
    "then", "has", "have", "had", "will", "would", "can", "could", "should", "may", "might",
    "must", "shall", "which", "who", "whom", "what", "when", "where", "why", "how", "does",
    "did", "done", "yet", "now", "one",
))
#: A fact-like token: a whitespace-delimited stretch with a digit, a URL, a path, an address
#: (each taken to the end of its stretch), or a short quoted name. The first four are tried
#: only where a stretch starts or right after a quote: tried anywhere else they fail as they
#: failed at the stretch's start (a suffix of a stretch without a digit has none), and
#: retrying them at every position of a long stretch made the scan quadratic (3.7 ms on a
#: 20 KB output). ``tests/engine/test_text_patterns.py`` checks it against the plain pattern.
_FACT = re.compile(r"""(?:(?<!\S)|(?<=["']))(?:\S*\d\S*|https?://\S+|\S*[/\\]\S+|\S+@\S+)"""
                   r"""|"[^"]{1,80}"|'[^']{1,80}'""")
_PROSE_MIN_WORDS = 6
#: Two wordings of one answer share more of their vocabulary than they differ in. Jaccard
#: similarity >= 0.5 of the distinct content words is the point where that holds (at
#: least as many shared words as words in only one of them).
PROSE_SIMILARITY = 0.5
_MAX_PROSE = 16384


def _facts(text: str) -> set[str]:
    return {m.group(0).strip(".,;:!?()[]{}").lower() for m in _FACT.finditer(text)}


def _words(text: str) -> set[str]:
    """The content words of a text: words of three letters or more, lower-cased, without
    the function words."""
    if text.isascii():  # (lower-casing ASCII first keeps every word as it is: one pass, in C)
        return set(_WORD.findall(text.lower())).difference(_FUNCTION_WORDS)
    return {w for w in (m.lower() for m in _WORD.findall(text)) if w not in _FUNCTION_WORDS}


def content_words(text: str) -> set[str]:
    """The content words of a text (words of three letters or more, lower-cased, the
    English function words left out): what :func:`same_prose` compares. A text without
    any ("ok", "Done.") states nothing a rewording could be judged by."""
    return _words(text)


def _lines(text: str) -> set[str]:
    return {" ".join(line.split()).lower() for line in text.splitlines() if line.strip()}


def same_prose(new: str, old: str, sets: dict[str, list[set[str] | None]] | None = None) -> bool:
    """Whether ``new`` says what ``old`` said, in other words.

    True only when both are prose (at least six content words), ``new`` carries no
    fact-like token (a number, an identifier with a digit, a URL, a path, a quoted name)
    that ``old`` did not, no new short line of ``new`` holds such a token (a log that
    gained lines is new), and their content words (function words left out) overlap with
    Jaccard similarity of at least :data:`PROSE_SIMILARITY`.

    (The conditions are checked cheapest first: the word sets and their overlap, then the
    fact-like tokens and the lines. ``sets``: where a text's word and fact sets are kept
    for a while (:class:`ResultMemory` keeps them per run), since the text a result is
    compared with was itself a new result a call earlier.)"""
    if new == old or len(new) > _MAX_PROSE or len(old) > _MAX_PROSE:
        return False
    if sets is None:
        sets = {}
    new_words, old_words = _kept(sets, new, 0), _kept(sets, old, 0)
    if len(new_words) < _PROSE_MIN_WORDS or len(old_words) < _PROSE_MIN_WORDS:
        return False
    shared = len(new_words & old_words)
    if shared / len(new_words | old_words) < PROSE_SIMILARITY:
        return False
    if not _kept(sets, new, 1) <= _kept(sets, old, 1):
        return False
    # no new short line with a figure in it (a log line, a status line)
    return not any(_facts(line) and len(_words(line)) < _PROSE_MIN_WORDS for line in _lines(new) - _lines(old))


_MAX_KEPT = 16  # texts whose sets a ResultMemory keeps


def _kept(sets: dict[str, list[set[str] | None]], text: str, which: int) -> set[str]:
    """:func:`_words` (``which`` 0) or :func:`_facts` (1) of ``text``, kept in ``sets`` (the
    texts compared last: each new result is the old one of the next comparison; the sets
    are only read; past 16 texts the oldest is forgotten)."""
    entry = sets.get(text)
    if entry is None:
        if len(sets) >= _MAX_KEPT:
            del sets[next(iter(sets))]
        entry = sets[text] = [None, None]
    found = entry[which]
    if found is None:
        found = entry[which] = (_facts if which else _words)(text)
    return found


# -- learned volatile fields -----------------------------------------------------------------

_OPAQUE = re.compile(r"^(?=[^\s]*\d)[\w.:\-/+=]{8,}$")
_MAX_LEARN_TOOLS = 8
_MAX_LEARN_KEYS = 32
_MAX_COMMANDS = 512


def _opaque(value: Any) -> bool:
    """An opaque token: an identifier-like string with a digit and no spaces (8+
    characters), or a whole number of 10+ digits (an epoch time). Counters, words and
    small numbers are content."""
    if isinstance(value, str):
        return bool(_OPAQUE.match(value))
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**9


#: A field of a JSON-object result: a top-level key, or (key, inner key) one level down.
Field = str | tuple[str, str]


def opaque_fields(result: Mapping[str, Any]) -> dict[Field, Any]:
    """The opaque scalars of a JSON-object result (:func:`_opaque`), at the top level and
    one level down (mappings of up to 32 keys): the candidate envelope fields."""
    out: dict[Field, Any] = {}
    for k, v in result.items():
        if not isinstance(k, str):
            continue
        if isinstance(v, Mapping):
            if len(v) <= _MAX_LEARN_KEYS:
                out.update(((k, k2), v2) for k2, v2 in v.items() if isinstance(k2, str) and _opaque(v2))
        elif _opaque(v):
            out[k] = v
    return out


def has_opaque(result: Mapping[str, Any]) -> bool:
    """Whether a JSON-object result has an opaque token at its top level or one level
    down (a candidate envelope field, see :class:`ResultMemory`)."""
    return len(result) <= _MAX_LEARN_KEYS and bool(opaque_fields(result))


def without(result: Mapping[str, Any], fields: frozenset[Field]) -> dict[str, Any]:
    """A copy of ``result`` without ``fields`` (top-level keys and ``(key, inner)`` pairs)."""
    inner: dict[str, set[str]] = {}
    for f in fields:
        if isinstance(f, tuple):
            inner.setdefault(f[0], set()).add(f[1])
    out: dict[str, Any] = {}
    for k, v in result.items():
        if k in fields:
            continue
        drop = inner.get(k)
        if drop and isinstance(v, Mapping):
            v = {k2: v2 for k2, v2 in v.items() if k2 not in drop}
        out[k] = v
    return out


class ResultMemory:
    """What one run remembers about its tools' recent results, for the questions a digest
    cannot answer; bounded (a few tools, the last result of each).

    **Learned volatile fields.** A field of a tool's JSON-object results (at the top level
    or one level down, as in ``{"result": {"query_id": …, "hits": …}}``) is learned
    volatile when the same request (tool and arguments) got a result that repeats the
    previous one for that request in every field but one or two, and those fields
    held a different opaque token each time (:func:`_opaque`): the envelope of a reply
    (``query_id``, a response ``id``, a served-at time in epoch form), not its content.
    From then on the field is stripped from that tool's results before they are compared.
    Counters, words and small numbers never qualify: a poll whose counter moved advanced.
    (This reads only the fields' values: cheap, and enough for an envelope.)

    **Reworded results.** The last plain-text result of each tool is kept (up to 16 KB) so
    that the same request answered in other words (:func:`same_prose`) is recognised as
    nothing new."""

    __slots__ = ("_commands", "_last", "_prose", "_sets", "learned")

    def __init__(self) -> None:
        # (the tables are made when first needed: most runs never need some of them)
        self.learned: dict[str, frozenset[Field]] | None = None  # tool -> fields learned volatile
        # tool -> (request digest, {field: value} of opaque scalars, digest of the rest)
        self._last: dict[str, tuple[int, dict[Field, Any], int]] | None = None
        # tool -> (request, its last text result or JSON object with a prose field)
        self._prose: dict[str, tuple[int, Any]] | None = None
        self._commands: set[int] | None = None  # request digests of the commands sent so far
        self._sets: dict[str, list[set[str] | None]] | None = None  # word and fact sets of texts compared last

    def new_command(self, request: int) -> bool:
        """Note a command; whether the run had not sent it before (bounded: past 512
        commands the oldest are forgotten, which can only count a repeat as new)."""
        commands = self._commands
        if commands is None:
            commands = self._commands = set()
        if request in commands:
            return False
        if len(commands) >= _MAX_COMMANDS:
            commands.clear()
        commands.add(request)
        return True

    def strip(self, tool: str, result: Mapping[str, Any]) -> Mapping[str, Any]:
        """``result`` without the fields learned for ``tool``."""
        keys = self.learned.get(tool) if self.learned else None
        if not keys:
            return result
        return without(result, keys)

    def learn(self, tool: str, request: int, result: Mapping[str, Any], rest_digest: Any,
              opaque: dict[Field, Any] | None = None) -> bool:
        """Note a JSON-object result of ``tool`` for ``request``; ``rest_digest(fields)``
        digests the result without those fields (``opaque``: the result's
        :func:`opaque_fields`, when the caller has them). True when a field was learned now."""
        if len(result) > _MAX_LEARN_KEYS:
            return False
        if opaque is None:
            opaque = opaque_fields(result)
        table = self._last
        last = table.get(tool) if table is not None else None
        if not opaque:
            if last is not None:
                del table[tool]  # type: ignore[union-attr]
            return False
        if table is None:
            table = self._last = {}
        rest = rest_digest(frozenset(opaque))
        if len(table) >= _MAX_LEARN_TOOLS and last is None:
            table.pop(next(iter(table)))
        table[tool] = (request, opaque, rest)
        if last is None or last[0] != request or last[2] != rest or set(last[1]) != set(opaque):
            return False
        # The rest repeated (and the opaque fields that kept their value with it): the
        # ones that changed are the envelope.
        changed = frozenset(k for k, v in opaque.items() if last[1][k] != v)
        if not changed or len(changed) > 2:
            return False
        if self.learned is None:
            self.learned = {}
        known = self.learned.get(tool, frozenset())
        if changed <= known:
            return False
        self.learned[tool] = known | changed
        return True

    def reworded(self, tool: str, request: int, result: str | Mapping[str, Any]) -> bool:
        """Whether ``result`` answers ``tool``'s previous request again in other words (the
        first wording stays the reference); remembers ``result`` otherwise.

        A text is compared whole (:func:`same_prose`). A JSON object qualifies when it has
        the keys of the previous answer, and every top-level value that differs is a text
        that rewords the previous one (a page's title and URL unchanged, its description
        in other words); only objects with a prose field (a text of 40+ characters with a
        space, at the top level) are remembered."""
        prose = self._prose
        if prose is None:
            prose = self._prose = {}
        last = prose.get(tool)
        if last is not None and last[0] == request:
            sets = self._sets
            if sets is None:
                sets = self._sets = {}
            if _reworded(result, last[1], sets):
                return True
        if (isinstance(result, str) and len(result) <= _MAX_PROSE) or _has_prose_field(result):
            if last is None and len(prose) >= _MAX_LEARN_TOOLS:
                prose.pop(next(iter(prose)))
            prose[tool] = (request, result)
        elif last is not None:
            del prose[tool]
        return False


def _has_prose_field(result: Any) -> bool:
    if not isinstance(result, Mapping) or len(result) > _MAX_LEARN_KEYS:
        return False
    return any(isinstance(v, str) and 40 <= len(v) <= _MAX_PROSE and " " in v for v in result.values())


def _reworded(new: Any, old: Any, sets: dict[str, list[set[str] | None]]) -> bool:
    if isinstance(new, str):
        return isinstance(old, str) and same_prose(new, old, sets)
    if not isinstance(new, Mapping) or not isinstance(old, Mapping) or new.keys() != old.keys():
        return False
    changed = [k for k in new if new[k] != old[k]]
    return bool(changed) and all(
        isinstance(new[k], str) and isinstance(old[k], str) and same_prose(new[k], old[k], sets) for k in changed)
