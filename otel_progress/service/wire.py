"""Splicing a serialized ``ExportTraceServiceRequest``: some spans' bytes replaced and
scopes added to resources, every other byte left as it came in.

Annotating a batch changes a few spans; the rest of the request (the other spans, the
resources and scopes, their field order, unknown fields) is forwarded as the bytes that
came in: only the length prefixes that enclose a replaced span (its scope's, its
resource's) are written again. The Collector writes a message's fields last to first
(``schema_url``, the scopes, then ``resource``); a request re-serialized from a parsed
message would have them first to last, so splicing also keeps the sender's encoding.

The walk reads the protobuf wire format of the three enclosing levels only (request →
``ResourceSpans`` → ``ScopeSpans`` → span bytes); spans are never parsed here. Indices
count what the protobuf runtime counts: the ``resource_spans``, ``scope_spans`` and
``spans`` fields with the length-delimited wire type, in the order they occur. Bytes the
walk cannot read (truncated, or groups: a deprecated wire type OTLP does not use) raise
:class:`WireError` (the caller falls back to re-serializing).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

__all__ = ["WireError", "encode_varint", "splice_request"]

Loc = tuple[int, int, int]  # (resource index, scope index, span index), as decode.Loc
#: ``rewrite(loc, span bytes)``: the span's new bytes, or None to keep it as it came.
Rewrite = Callable[[Loc, bytes], "bytes | None"]

_LEN = 2  # the length-delimited wire type
_FIELD_REPEATED = 2  # resource_spans is field 1 of the request; scope_spans and spans are field 2


class WireError(ValueError):
    """Bytes the walk cannot read as protobuf (truncated, or a wire type it does not know)."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """The varint at ``i`` and the index after it."""
    byte = buf[i]
    if byte < 0x80:
        return byte, i + 1
    value, shift = byte & 0x7F, 7
    while True:
        i += 1
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def encode_varint(n: int) -> bytes:
    """``n`` (not negative) as a protobuf varint."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """The fields of the message in ``buf[start:end]``: ``(number, wire type, field start,
    payload start, field end)`` (for a length-delimited field, the payload is after its
    length; for the others, after the tag)."""
    i = start
    try:
        while i < end:
            tag, j = _varint(buf, i)
            wire = tag & 7
            payload = j
            if wire == _LEN:
                size, payload = _varint(buf, j)
                k = payload + size
            elif wire == 0:
                k = _varint(buf, j)[1]
            elif wire == 1:
                k = j + 8
            elif wire == 5:
                k = j + 4
            else:  # groups (3, 4: deprecated, nothing in OTLP) and unknown types
                raise WireError(f"wire type {wire} at byte {i}")
            if k > end:
                raise WireError(f"field at byte {i} runs past its message")
            yield tag >> 3, wire, i, payload, k
            i = k
    except IndexError as exc:
        raise WireError("truncated message") from exc


def _rebuilt(buf: bytes, start: int, payload: int, body: bytes | bytearray) -> bytes:
    """A length-delimited field with a new payload: its tag as it came, the new length."""
    tag_end = _varint(buf, start)[1]
    return bytes(buf[start:tag_end]) + encode_varint(len(body)) + bytes(body)


def splice_request(raw: bytes, locs: Collection[Loc], rewrite: Rewrite,
                   added: Mapping[int, Sequence[bytes]] | None = None) -> bytes:
    """``raw`` with the span at each of ``locs`` replaced by what ``rewrite`` gives (None:
    left as it came), and each serialized ``ScopeSpans`` of ``added[resource index]``
    appended to that resource (an index past the last resource: to the last). Every other
    byte is kept; a request where nothing changes is returned as it is."""
    added = added or {}
    by_resource: dict[int, dict[int, set[int]]] = {}
    for ri, si, j in locs:
        by_resource.setdefault(ri, {}).setdefault(si, set()).add(j)
    resources = [(start, payload, after) for number, wire, start, payload, after in _fields(raw, 0, len(raw))
                 if number == 1 and wire == _LEN]
    if not resources:
        return raw
    last = len(resources) - 1
    appended: dict[int, list[bytes]] = {}
    for ri, scopes in added.items():
        appended.setdefault(min(ri, last), []).extend(scopes)
    out = bytearray()
    done = 0
    for ri, (start, payload, after) in enumerate(resources):
        wanted, extra = by_resource.get(ri), appended.get(ri)
        if not wanted and not extra:
            continue
        body = _resource(raw, payload, after, ri, wanted or {}, rewrite)
        if extra:
            body = (body if body is not None else bytearray(raw[payload:after]))
            for scope in extra:
                body += b"\x12" + encode_varint(len(scope)) + scope
        if body is None:
            continue
        out += raw[done:start]
        out += _rebuilt(raw, start, payload, body)
        done = after
    if not done:
        return raw
    out += raw[done:]
    return bytes(out)


def _resource(raw: bytes, start: int, end: int, ri: int, wanted: Mapping[int, set[int]],
              rewrite: Rewrite) -> bytearray | None:
    """A ``ResourceSpans``'s payload with its wanted spans rewritten, or None if none changed."""
    out = bytearray()
    done = start
    si = -1
    for number, wire, fstart, payload, after in _fields(raw, start, end):
        if number != _FIELD_REPEATED or wire != _LEN:
            continue
        si += 1
        spans = wanted.get(si)
        if not spans:
            continue
        body = _scope(raw, payload, after, (ri, si), spans, rewrite)
        if body is None:
            continue
        out += raw[done:fstart]
        out += _rebuilt(raw, fstart, payload, body)
        done = after
    if done == start:
        return None
    out += raw[done:end]
    return out


def _scope(raw: bytes, start: int, end: int, where: tuple[int, int], spans: set[int],
           rewrite: Rewrite) -> bytearray | None:
    """A ``ScopeSpans``'s payload with its wanted spans rewritten, or None if none changed."""
    out = bytearray()
    done = start
    j = -1
    left = len(spans)
    for number, wire, fstart, payload, after in _fields(raw, start, end):
        if number != _FIELD_REPEATED or wire != _LEN:
            continue
        j += 1
        if j not in spans:
            continue
        new = rewrite((where[0], where[1], j), raw[payload:after])
        if new is not None:
            out += raw[done:fstart]
            out += _rebuilt(raw, fstart, payload, new)
            done = after
        left -= 1
        if not left:
            break
    if done == start:
        return None
    out += raw[done:end]
    return out
