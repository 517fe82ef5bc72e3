"""What the signals evaluate: a step (one turn of a run: a tool call, or a batch of
parallel calls from one model response) and the facts of each of its calls.

The pipeline builds them (:mod:`.facts` computes a call's facts once); every signal reads
them and none changes them, but for the exemptions the wait and compaction signals grant
(:attr:`Step.exempt`, :attr:`Step.recovery`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CallFacts", "Step"]


@dataclass(slots=True)
class CallFacts:
    """The digests of one tool call, computed once and shared by every signal."""

    tool: str
    key: int | None  # name + canonical arguments + result (or error); None: not comparable
    call: int  # name + canonical arguments: the request alone (wait episodes, notes)
    result: int | None  # process-local digest of the result (volatile fields stripped); None if absent
    parsed_result: Any  # the result parsed from JSON where it was JSON, else as given
    empty: bool  # the result carries nothing (empty list/map/string, "0 results", ...)
    ack: bool  # the result is a bare acknowledgement ("ok", "Successfully modified x")
    error: int | None  # error signature digest, None if the call succeeded
    action: int | None  # process-local digest of the normalised action; None: no content
    args: Any  # the arguments, parsed from JSON where they were JSON (None: absent)
    span_id: str
    command: bool = False  # the arguments carry a command (a shell/terminal-style call)
    silent: bool = False  # the result has no text at all (not even "0 results")
    # an undeclared change to the world: a bare acknowledgement answering a request that
    # differs from the tool's previous one, or a new command that succeeded silently
    world: bool = False
    repeat: bool = False  # the request is the same as the tool's previous request
    wait: bool = False  # a successful command that waits on purpose (``sleep 5 && cat log``)
    wait_command: bool = False  # a command that waits on purpose, whether it failed or not
    incidental: bool = False  # the result rewords the tool's previous answer to this request
    # the result is only a size or a truncated preview (evidence level "arguments"): a
    # differing one is new, an equal one proves nothing (never "the same result")
    partial: bool = False
    # the state of the location the result shows (location and what it showed there,
    # see views.py); None: the result names no location
    place: int | None = None
    # what the world answered, compared across requests (signals/answer.py): the failure's
    # identity, or the result's (volatile tokens told apart: volatile.Answers); None: not an
    # answer to compare (empty, partial, a write's own echo, a view, or not captured)
    answer: int | None = None
    # the request carries content of its own (a file's text, a patch: content.echoes_request)
    writes: bool = False


@dataclass(slots=True)
class Step:
    """One turn: a tool call, or a batch of parallel calls from one model response."""

    turn: int
    calls: tuple[Any, ...]  # the ToolCall objects
    facts: tuple[CallFacts, ...]
    key: int | None  # sorted multiset of call keys; None if any call is not comparable
    tool: str  # tool names, sorted and joined by "+"
    start_ns: int
    end_ns: int
    span_id: str  # the span a detection on this step is reported on
    tokens: int  # run tokens consumed up to this step
    new_evidence: int = 0  # result digests never seen before in the run
    exempt: bool = False  # a legitimate wait: repeat/frequency/barren skip this step
    wrote: bool = False  # a successful call of a tool declared "write"
    world: bool = False  # a call of the step changed the world undeclared (CallFacts.world)
    # goal, plan node, evidence part, obligations, blocked_on: the state signature's
    # parts other than the actions (None: the step has no signature)
    signature_parts: tuple[str, str, str, str, str] | None = None
    partial: bool = False  # a call of the step has a partial result (CallFacts.partial)
    # a re-read expected after a compaction (signals/compaction.py): exempt too, and the
    # location signal does not count it as a revisit
    recovery: bool = False
