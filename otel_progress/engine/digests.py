"""Sets and windows of 64-bit digests kept in ``array("q")`` (no Python object per
element): the sorted sets of evidence a run and a trace admit (:func:`admit`), the byte
searches the run state and the signals use on their windows (:func:`holds`,
:func:`count_last`), and the mask of process-local digests (:data:`MASK`).
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left

__all__ = ["MASK", "admit", "count_last", "holds"]

_BYTE_ORDER = sys.byteorder  # as array("q") lays out its items

#: A process-local digest is ``hash(...) & MASK`` (non-negative, 63 bits).
MASK = (1 << 63) - 1


def admit(evidence: array[int], digest: int, cap: int) -> bool:
    """Add a digest to a sorted array of distinct digests; False if it was there.
    Past ``cap`` entries the array is emptied: forgetting can only hide a loop, never
    invent one."""
    i = bisect_left(evidence, digest)
    if i < len(evidence) and evidence[i] == digest:
        return False
    if len(evidence) >= cap:
        del evidence[:]
        i = 0
    evidence.insert(i, digest)
    return True


def holds(window: array[int], value: int) -> bool:
    """``value in window`` for an array of 64-bit integers, without the Python object
    each element would become: a byte search for the value's 8 bytes, kept only where a
    hit lines up with an element (a hit across two elements is not the value)."""
    data = window.tobytes()
    needle = value.to_bytes(8, _BYTE_ORDER, signed=True)
    i = data.find(needle)
    while i > 0 and i % 8:
        i = data.find(needle, i + 1)
    return i >= 0


def count_last(window: array[int], value: int) -> int:
    """``window.count(value)`` where ``value`` is ``window[-1]``: how often the last value
    occurs in the window. The usual answer is 1 (no earlier copy), known when a byte search
    for the value's 8 bytes first hits at the last element (an earlier element equal to it
    would be hit before); otherwise the elements are counted."""
    data = window.tobytes()
    if data.find(value.to_bytes(8, _BYTE_ORDER, signed=True)) == len(data) - 8:
        return 1
    return window.count(value)
