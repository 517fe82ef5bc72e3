"""Where an answer comes from: the location a tool result, or its request, names.

A **location** is the place a result shows: a page (a URL without its tracking and
opaque parameters, or a file path; a page title when nothing else names it) and a
position on it (a scroll position or viewport, a page of a document, a line range). Two
answers at one location are two looks at one thing, so they can be compared with each
other, whatever request led there (another link, a reworded search, the same click).

:func:`location_of` reads it from what the call already carries, never from a tool's
name:

* the **result**, when it says where it is at its head (the first 600 characters): a
  Markdown link ``[title](url)`` with a position phrase (``positioned 8% down``, ``at
  the top of the page``, ``page 2 of 5``, ``lines 10-40``, the viewport's size), a
  labelled line (``URL:``, ``Address:``, ``Page URL:``, ``Current url:``, ``Navigated
  to:``) or a first line that is a URL; such a text result is a **view**: a rendering of
  the location that may be re-worded from one look to the next (a model's transcription
  of a page, see :mod:`otel_progress.evidence.views`). A JSON object's ``url``/``path``-like
  field, with its position fields, names a location too (compared byte for byte). The
  output of a command (a shell or terminal call) is never a view.
* else the **request**, when its arguments name a ``url``/``path``/``file``-like target,
  perhaps a position (``offset``, ``line``, ``view_range``, ``page``), and nothing else
  but flags and one-word options: the result is then content read from there, compared
  byte for byte. A request that carries content (an edit's ``insert``, a write's
  ``content``) changes its target; its answer shows no place.

URLs are normalised so that one place has one name: scheme and host lower-cased, a
leading ``www.`` and a trailing ``/`` dropped, an empty fragment dropped, query
parameters sorted, those without a value, with an opaque value (a session, request or
client id: :func:`~otel_progress.evidence.opaque.is_opaque`) or with a well-known tracking name
(``utm_*``, ``gclid``, ``fbclid``, ...) dropped, and a free-text value (a search query)
reduced to its sorted distinct content words, so that ``q=refund policy`` and
``q=policy+refund`` are one search. A position within half a viewport of another is the
same position (the two views overlap by more than they differ).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, unquote_plus, urlsplit

from .opaque import is_opaque

__all__ = ["HEAD", "Location", "LocationReader", "location_of", "normalise_url", "request_location", "result_location"]

#: How much of a text result's head is read for its location (a view states it first).
HEAD = 600

_LINK = re.compile(r"\[([^\]\n]{0,300})\]\(((?:https?|file)://[^)\s]{1,2000})\)")
_LABELLED = re.compile(
    r"(?im)^[ \t\-*#>]*(?:page\s+url|url|address|current\s+url|location|navigated\s+to)\s*:\s*"
    r"((?:https?|file)://\S{1,2000}|/[^\s]{1,1000})")
_BARE = re.compile(r"^\s*(?:[\w ]{0,30}:\s*)?((?:https?|file)://\S{1,2000})\s*$")
_PCT_DOWN = re.compile(r"(\d{1,3}(?:\.\d+)?)\s*%\s*down", re.IGNORECASE)
_TOP = re.compile(r"\bat the top of the (?:page|document|screen)\b", re.IGNORECASE)
_BOTTOM = re.compile(r"\bat the (?:bottom|end) of the (?:page|document|screen)\b", re.IGNORECASE)
_VIEWPORT = re.compile(r"viewport\s+shows\s+(\d{1,3}(?:\.\d+)?)\s*%", re.IGNORECASE)
_PAGE_OF = re.compile(r"\bpage\s+(\d{1,6})\s+of\s+(\d{1,6})\b", re.IGNORECASE)
_LINES = re.compile(r"\blines?\s+(\d{1,7})\s*(?:-|–|to)\s*(\d{1,7})\b", re.IGNORECASE)

#: Query parameters that only say where a visitor came from.
TRACKING_PARAMS: frozenset[str] = frozenset({
    "gclid", "fbclid", "msclkid", "dclid", "yclid", "igshid", "mc_cid", "mc_eid", "_ga", "_gl", "ref",
    "ref_", "referrer", "ref_src", "spm", "scid", "trk", "trkinfo",
})
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset((
    "a", "an", "the", "of", "in", "on", "at", "to", "for", "from", "by", "with", "and", "or", "is", "are",
    "was", "were", "be", "what", "which", "who", "how", "when", "where", "does", "do", "did",
))
_URL_KEYS = ("url", "uri", "href", "address", "current_url", "page_url", "link")
_PATH_KEYS = ("path", "file", "file_path", "filepath", "filename", "target_file", "absolute_path")
_TARGET_KEYS = frozenset(_URL_KEYS + _PATH_KEYS)
_POSITION_KEYS = ("view_range", "line", "lines", "start_line", "end_line", "offset", "limit", "page",
                  "start", "end", "scroll", "scroll_y", "scroll_position", "position")


@dataclass(frozen=True, slots=True)
class Location:
    """A location: the page (a normalised URL or a path), the position on it (``""``
    when none is stated), and whether the result is a **view**: a text that names the
    location at its head and renders it (compared as a transcription may vary, see
    :mod:`otel_progress.evidence.views`), rather than content named by the request or a JSON
    record (compared byte for byte)."""

    page: str
    position: str
    view: bool

    @property
    def key(self) -> tuple[str, str]:
        """The location's identity (page and position)."""
        return self.page, self.position


def _query_value(value: str) -> str:
    if " " not in value:
        return value
    words = sorted({w for w in _WORD.findall(value.lower()) if w not in _STOP})
    return " ".join(words)


def normalise_url(url: str) -> str:
    """The URL a location is named by (see the module docstring)."""
    url = url.strip().rstrip(").,;'\"")
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    host = parts.netloc.lower()
    if host.startswith("www."):
        host = host[4:]
    path = parts.path.rstrip("/") or ""
    params = []
    for field in parts.query.split("&") if parts.query else ():
        # (as urllib.parse.parse_qsl with blank values kept reads a field, each part decoded
        # only where it has something to decode; a blank value is dropped before that)
        key, _, value = field.partition("=")
        if not value:
            continue
        if "%" in value or "+" in value:
            value = unquote(value.replace("+", " "))
        k = (unquote(key.replace("+", " ")) if "%" in key or "+" in key else key).lower()
        if k in TRACKING_PARAMS or k.startswith("utm_") or (len(value) >= 8 and is_opaque(value)):
            continue  # (is_opaque holds for no value shorter than 8)
        if "%" in value or "+" in value:
            value = unquote_plus(value)
        params.append((k, _query_value(value) if " " in value else value))
    params.sort()
    query = "&".join(f"{k}={v}" for k, v in params)
    out = f"{parts.scheme.lower()}://{host}{path}"
    if query:
        out += "?" + query
    if parts.fragment:
        out += "#" + parts.fragment
    return out


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def _position(head: str) -> str:
    """The position a view's head states, coarsened to half a viewport where the
    viewport's size is stated (each phrase looked for only where its words are)."""
    lower = head.lower()
    if "%" in head:
        viewport = _VIEWPORT.search(head) if "viewport" in lower else None
        half = _number(viewport.group(1)) / 2 if viewport else 0.0
        down = _PCT_DOWN.search(head) if "down" in lower else None
        if down is not None or ("top of the" in lower and _TOP.search(head)):
            pct = _number(down.group(1)) if down is not None else 0.0
            return f"@{round(pct / half)}" if half else f"@{pct:g}"
    elif "top of the" in lower and _TOP.search(head):
        return "@0"
    if ("bottom of the" in lower or "end of the" in lower) and _BOTTOM.search(head):
        return "@bottom"
    if "page" in lower:
        page = _PAGE_OF.search(head)
        if page:
            return f"page {page.group(1)}"
    if "line" in lower:
        lines = _LINES.search(head)
        if lines:
            return f"lines {lines.group(1)}-{lines.group(2)}"
    return ""


def _read_head(head: str, normalise: Callable[[str], str] = normalise_url) -> Location | None:
    position = _position(head)
    link = _LINK.search(head) if position and "](" in head else None
    if link is not None:  # a linked page and where on it the view is: "[title](url) ... 8% down"
        page = normalise(link.group(2))
    else:
        labelled = _LABELLED.search(head)
        if labelled is not None:
            target = labelled.group(1)
            page = normalise(target) if "://" in target else target.rstrip("/.,;")
        else:
            first = head.split("\n", 1)[0]
            bare = _BARE.match(first) if len(first) <= 2100 and "://" in first else None
            if bare is None:
                return None
            page = normalise(bare.group(1))
    return Location(page, position, True)


def _from_fields(values: Mapping[str, Any], normalise: Callable[[str], str] = normalise_url) -> Location | None:
    """The location named by a mapping's ``url``-like (with a scheme) or ``path``-like
    field, with the position its position fields state (compared byte for byte)."""
    for keys, is_url in ((_URL_KEYS, True), (_PATH_KEYS, False)):
        for key in keys:
            value = values.get(key)
            if isinstance(value, str) and value.strip() and (not is_url or "://" in value):
                page = normalise(value) if is_url else value.strip().rstrip("/")
                return Location(page, _fields_position(values), False)
    return None


def _fields_position(values: Mapping[str, Any]) -> str:
    found = []
    for key in _POSITION_KEYS:
        value = values.get(key)
        if value is not None and not isinstance(value, (dict, bool)):
            found.append(f"{key}={value}")
    return ",".join(found)


def _reads_only(args: Mapping[str, Any]) -> bool:
    """Whether a request only names where to read: besides its location and position
    arguments it carries nothing but flags and one-word options (``command: view``), no
    content (an edit's ``insert``, a write's ``content``: its answer acknowledges a change,
    it shows no place)."""
    for key, value in args.items():
        if key in _URL_KEYS or key in _PATH_KEYS or key in _POSITION_KEYS:
            continue
        if value is None or isinstance(value, (bool, int, float)):
            continue
        if isinstance(value, str) and len(value) <= 16 and " " not in value and "\n" not in value:
            continue
        return False
    return True


def request_location(args: Any) -> Location | None:
    """The location a request's arguments name (a mapping of up to eight arguments that
    only says where to read, see :func:`location_of`), or None."""
    return LocationReader().request(args)


def result_location(parsed: Any, command: bool = False) -> Location | None:
    """The location a result names itself (its head, or a JSON object's fields), or None;
    ``command``: the call sends a command (its output is never a view)."""
    return LocationReader().result(parsed, command)


def location_of(args: Any, parsed: Any, command: bool = False) -> Location | None:
    """The location a call's result shows: named by the result or, failing that, by the
    request's arguments; None when neither names one. A command's output (``command``:
    the call sends a shell or terminal command) is a program's output, never a view."""
    reader = LocationReader()
    return reader.result(parsed, command) or reader.request(args)


class LocationReader:
    """:func:`result_location` and :func:`request_location` with bounded tables of what
    they read last: the locations of recent heads of text results, and recent normalised
    URLs (a page is shown and named again and again). One per engine; each table is
    emptied when full."""

    __slots__ = ("_heads", "_urls")

    def __init__(self) -> None:
        self._heads: dict[str, Location | None] = {}
        self._urls: dict[str, str] = {}

    def url(self, url: str) -> str:
        """:func:`normalise_url`, remembered."""
        urls = self._urls
        done = urls.get(url)
        if done is None:
            if len(urls) >= _MAX_URLS:
                urls.clear()
            done = urls[url] = normalise_url(url)
        return done

    def head(self, head: str) -> Location | None:
        """The location a text result's head names, remembered."""
        heads = self._heads
        if head in heads:
            return heads[head]
        if len(heads) >= _MAX_HEADS:
            heads.clear()
        found = heads[head] = _read_head(head, self.url)
        return found

    def result(self, parsed: Any, command: bool = False) -> Location | None:
        """See :func:`result_location`."""
        if type(parsed) is str:
            if not parsed or command or parsed.find("://", 0, HEAD) < 0:
                return None
            return self.head(parsed[:HEAD])
        if (type(parsed) is dict or isinstance(parsed, Mapping)) and len(parsed) <= 64 and (
                not _TARGET_KEYS.isdisjoint(parsed)):
            return _from_fields(parsed, self.url)
        return None

    def request(self, args: Any) -> Location | None:
        """See :func:`request_location`."""
        if args is None or not (type(args) is dict or isinstance(args, Mapping)) or not args or len(args) > 8 or (
                _TARGET_KEYS.isdisjoint(args) or not _reads_only(args)):
            return None
        return _from_fields(args, self.url)


_MAX_HEADS = 512
_MAX_URLS = 4096
