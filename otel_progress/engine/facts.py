"""The facts of one tool call (:class:`~otel_progress.engine.step.CallFacts`): the digests
of its request, its result and its failure, computed once per call and shared by every
signal (:class:`FactBuilder`).

This is the engine's hottest path (``bench/bench_engine.py``): what a tool name, an
argument text, a plain-text result or a failure alone determines is remembered in small
bounded tables (emptied when full), and a run's own memory (volatile fields learned,
reworded answers, what each location showed) is kept in its
:class:`~otel_progress.engine.runstate.RunState`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..evidence.blobs import holds_blob
from ..evidence.canonical import Digester
from ..evidence.content import (
    Field,
    ResultMemory,
    echoes_request,
    is_ack,
    is_empty,
    is_silent,
    may_be_waiting,
    opaque_fields,
    without,
)
from ..evidence.generic import bare_acknowledgement
from ..evidence.location import Location, LocationReader
from ..evidence.opaque import OpaqueText
from ..evidence.views import Views
from ..evidence.volatile import Answers, mask_volatile
from ..model import NOT_CAPTURED, ToolCall
from .config import Config
from .digests import MASK
from .runstate import RunState
from .step import CallFacts
from .texts import MEMO_TEXT, TextFacts

__all__ = ["FactBuilder"]

_RAW_MIN = 512  # JSON results at least this long may be digested without parsing
_JSON_OPEN = ("{", "[")
_MAX_TOOLS_PER_RUN = 32  # tools whose last request a run remembers
_MEMO_JSON = 4096  # JSON results of a tool whose results are always stripped, up to this size ...
_MEMO_JSON_ENTRIES = 256  # ... this many (they are kept parsed)
_MAX_LEARN_KEYS = 32  # results with more top-level keys are never learned from (content.ResultMemory)
_TEXT_OPEN = ("{", "[", " ", "\n", "\t", "\r")  # a text parse_json_value may decode (not plain text)
#: What a result determines (FactBuilder._result_facts): its digest (None: no result), the
#: parsed result, whether it is empty, silent, a bare acknowledgement, whether it rewords
#: the tool's previous answer, the location it shows and whether that was looked for.
_Result = tuple[int | None, Any, bool, bool, bool, bool, Location | None, bool]
_ARGUMENTS, _NAMES = "arguments", "names"  # ToolCall.evidence_level (see the pipeline)


class FactBuilder:
    """Computes the facts of each call (:meth:`facts`): what its texts alone determine
    (:class:`~otel_progress.engine.texts.TextFacts`), then what they mean in its run.

    :meth:`facts` is the engine's hottest function. Its steps (request, result, location,
    failure, world) cost about 1.5 % of the engine's time on the real calls, measured
    (``bench/bench_engine.py``: 16.2x the floor against 15.9x with them inlined, three
    alternating runs of 7 rounds each): not worth inlining them again below 2 %."""

    def __init__(self, config: Config, digester: Digester, want_action: bool) -> None:
        """``want_action``: whether a signal uses the state signature (the normalised
        action's digest is computed only then)."""
        self.digester = digester
        self._want_action = want_action
        self._locations = LocationReader()  # (with its tables of recent heads and URLs)
        self.texts = texts = TextFacts(config, digester, want_action, self._locations)
        # The tool table and the lookups facts makes per call, bound once.
        self._tools = texts.tools
        self._tool = texts.tool
        self._request_facts = texts.request
        self._json_results: dict[str, tuple[bytes, Any]] = {}
        self._write_tools = frozenset(n for n, spec in config.manifest.items() if spec.kind == "write")
        waiting = config.waiting_values
        self._may_be_waiting: Callable[[str], bool] | None = (
            partial(may_be_waiting, waiting=waiting) if config.implicit_waits else None
        )

    def facts(self, call: ToolCall, run: RunState | None = None) -> CallFacts:
        """Compute the digests of one call (``run``: the run it belongs to, whose memory
        of recent results learns volatile fields and recognises reworded results)."""
        name = call.name
        call_prefix, action_prefix, wait_tool = self._tools.get(name) or self._tool(name)
        arguments = call.arguments
        result = call.result
        level = call.evidence_level
        if level == _NAMES:  # only names and success are trusted: nothing is compared
            arguments = result = NOT_CAPTURED
        partial = result is not NOT_CAPTURED and (level == _ARGUMENTS or call.result_truncated)
        has_args = arguments is not NOT_CAPTURED and arguments is not None
        if has_args:
            args, command, call_digest, args_action, waits, where = self._request_facts(
                name, arguments, call_prefix, action_prefix)
        else:
            args = command = args_action = where = None
            waits = False
            call_digest = self.digester.digest(call_prefix)
        repeated = run is not None and self._repeated(run, name, call_digest)
        result_digest, parsed, empty, silent, ack, incidental, located, looked = self._result_facts(
            call, run, name, result, call_digest, command is not None, where, wait_tool or repeated)
        place: int | None = None
        if run is not None and result_digest is not None and not empty and not call.error:
            if not looked:
                located = self._locations.result(parsed, command is not None) or where
            if located is not None:
                result_digest, place = self._place(run, located, call_digest, parsed, result_digest)
        error: int | None = None
        if call.error:
            error, repeats_message = self._error(call, run, name, result, call_digest, result_digest, parsed, silent)
            incidental = incidental or repeats_message
        # An argument-free request (go_back, next, scroll, undo) answered by a bare
        # acknowledgement ("Navigated back") that names no location moved something each
        # time: never the same step as another, a change of the world (generic.py).
        navigation = (has_args and not args and place is None and not call.error and type(parsed) is str
                      and bare_acknowledgement(parsed))
        # The turn key: the request and what came back. A failed call has none (a retry after
        # a transient error is legitimate; repeated failures are for the error signals).
        key = hash((call_digest, result_digest)) & MASK if result_digest is not None and not (
            call.error or navigation) else None
        action = None
        if self._want_action and (has_args or result_digest is not None) and not navigation:
            # The normalised action, for the state signature (see TextFacts._request).
            if action_prefix is None:
                action_prefix = name.strip().lower().encode("utf-8") + b":"  # raises, as normalising would
            # (no arguments: normalise_action(name, None), folding leaves None as it is)
            action = args_action if has_args else hash(action_prefix + b"null") & MASK
        world = navigation
        if not call.error and run is not None and (command is not None or ack):
            world = self._world(run, call_digest, command is not None, silent, navigation or not repeated)
        # (positional, in CallFacts' field order: cheaper than keywords on this path)
        facts = CallFacts(name, key, call_digest, result_digest, parsed, empty, ack, error, action, args,
                          call.span_id, command is not None, silent, world, repeated,
                          waits and not call.error, waits, incidental, partial)
        if place is not None:
            facts.place = place
        if has_args and (call.error or not (result_digest is None or empty or partial or ack or navigation
                                            or place is not None or facts.wait)):
            self._answer(facts, call, run, args, result, call_digest)  # (the same answer, signals/answer.py)
        return facts

    def _answer(self, facts: CallFacts, call: ToolCall, run: RunState | None, args: Any, result: Any,
                request: int) -> None:
        """What the call's answer is compared by (signals/answer.py), on ``facts``. A failure:
        its identity, unless the request carries its content (a failed write says how the
        agent writes, not what the world answers). A success: None for a write's own echo
        (the manifest's write tools, or content.echoes_request). A text of several lines (an
        output, a report, a traceback) is compared across requests, volatile tokens told
        apart (volatile.Answers); a one-line text or a structured value names no more than
        a status or a value whose meaning is the request's ("not enough balance" for
        another card is another fact): it is compared only with the same request's answers.
        (An empty, partial or acknowledging answer, a wait, a view: never called.)"""
        if call.error:
            facts.writes = echoes_request(args, None)
            if not facts.writes:
                output = result if type(result) is str and result.strip() else call.error_message
                many = output is not None and "\n" in output.strip()
                facts.answer = facts.error if many else hash((facts.error, request)) & MASK
            return
        parsed = facts.parsed_result
        if facts.tool in self._write_tools or echoes_request(args, parsed):
            return
        digest = facts.result
        if type(parsed) is not str or "\n" not in parsed.strip():
            facts.answer = hash((digest, request)) & MASK
        elif run is None:
            facts.answer = digest
        else:
            facts.answer = (run.answers or self._answers(run)).identity(facts.tool, parsed, digest,
                                                                        self.digester.text)

    @staticmethod
    def _answers(run: RunState) -> Answers:
        """The run's memory of its tools' recent answers (made when first needed)."""
        answers = run.answers = Answers()
        return answers

    @staticmethod
    def _repeated(run: RunState, name: str, call_digest: int) -> bool:
        """Whether the request is the same as the tool's previous request in the run
        (noting it as the tool's last)."""
        requests = run.last_requests
        previous = requests.get(name)
        if previous is None and len(requests) >= _MAX_TOOLS_PER_RUN:
            requests.clear()
        requests[name] = call_digest
        return previous == call_digest

    def _result_facts(self, call: ToolCall, run: RunState | None, name: str, result: Any, call_digest: int,
                      command: bool, where: Location | None, learns: bool) -> _Result:
        """The facts of the call's result: its digest (None: no result), the parsed result,
        whether it is empty, silent, a bare acknowledgement, whether it rewords the tool's
        previous answer to the request, and the location it shows with whether that was
        looked for already (``learns``: the tool is a wait tool or the request a repeat,
        where volatile fields are learned or a wait status parsed)."""
        if type(result) is str and holds_blob(result):
            pass  # (a blob is compared by its descriptor: the parsed path, below)
        elif type(result) is str and len(result) >= _RAW_MIN and result[:1] in _JSON_OPEN and not learns:
            # A long JSON result of a tool without volatile fields, with no waiting status
            # to parse for the implicit wait check, answering a request that is not a
            # repeat (where volatile fields are learned): digest it as received. It is
            # neither empty nor an acknowledgement, and carries no wait status.
            result_digest = self.digester.raw_result(result, name, self._may_be_waiting)
            if result_digest is not None:
                return result_digest, None, False, False, False, False, None, False
        elif type(result) is str and len(result) <= MEMO_TEXT and result and result[:1] not in _TEXT_OPEN:
            # Plain text (it cannot open a JSON document): what it says is a function of the
            # text alone, computed once for a text that came back before.
            result_digest, empty, silent, acked = self.texts.text_result(result)
            error = call.error
            incidental = False
            located = None
            looked = False
            if run is not None and not error:
                same_as = (run.opaque or self._opaque(run)).text_to_digest(name, call_digest, result)
                if same_as is not None:
                    result_digest = self.texts.text_result_of(same_as)[0]
                if not empty:
                    located = self._locations.result(result, command) or where
                    looked = True
                    if located is None or not located.view:  # (a view is judged at its location)
                        incidental = self.memory(run).reworded(name, call_digest, result)
            return result_digest, result, empty, silent, acked and not error, incidental, located, looked
        if result is not NOT_CAPTURED and not (call.error and result is None):
            return self._result(call, run, name, call_digest, result)
        return None, None, True, False, False, False, None, False

    @staticmethod
    def _place(run: RunState, located: Location, call_digest: int, parsed: Any,
               result_digest: int) -> tuple[int, int]:
        """The digest an answer from ``located`` (a page, a file, a position) stands for,
        and the location's state: an answer there that shows nothing new stands for what
        the location showed (views.py)."""
        views = run.views
        if views is None:
            views = run.views = Views()
        return views.observe(located, call_digest, parsed, result_digest)

    def _error(self, call: ToolCall, run: RunState | None, name: str, result: Any, call_digest: int,
               result_digest: int | None, parsed: Any, silent: bool) -> tuple[int, bool]:
        """A failed call's error signature digest, and whether its answer only repeats a
        message that says nothing (then it is no evidence of anything). A failure is what
        it says: its whole captured output, else its message; one that differs from its
        tool's last failure of its shape only in volatile tokens or a progress display is
        that failure (volatile.Answers)."""
        message = call.error_message
        output = result if type(result) is str and result.strip() else message
        text, generic = self.texts.failure(name, call.error_type, output)
        if not generic:
            error = self.digester.text(text)
            if run is not None and output:
                answers = run.answers or self._answers(run)
                error = answers.identity(f"{name}\x1f{call.error_type}", output, error, self.digester.text,
                                         progress=True)
            return error, False
        # A failure whose message says nothing about it (none, "Shell command failed",
        # "timed out"): the request is all that tells it from other failures of the tool
        # (each failing command its own signature), and an answer that only repeats the
        # message is no evidence of anything.
        text += "|" + str(call_digest)
        repeats = result_digest is not None and (
            silent or type(parsed) is not str or parsed.strip() == (message or "").strip())
        return self.digester.text(text), repeats

    def _world(self, run: RunState, call_digest: int, command: bool, silent: bool, acknowledged_new: bool) -> bool:
        """Whether a call that succeeded changed the world undeclared: a new command that
        succeeded silently, or a bare acknowledgement (``acknowledged_new``: of a request
        that differs from the tool's previous one, or of a navigation)."""
        if command:
            return self.memory(run).new_command(call_digest) and silent
        return acknowledged_new

    @staticmethod
    def _opaque(run: RunState) -> OpaqueText:
        """The run's table of the tools whose plain-text answers carry opaque tokens (made
        when first needed): :meth:`OpaqueText.text_to_digest` gives the text to digest in
        place of such an answer, or None."""
        opaque = run.opaque = OpaqueText(mask_volatile)
        return opaque

    def _result(self, call: ToolCall, run: RunState | None, name: str, request: int,
                result: Any) -> _Result:
        """:meth:`_result_facts` of a result that is not plain text: its digest (without
        volatile and learned fields), the parsed result, whether it is empty, silent, a bare
        acknowledgement, whether it rewords the tool's previous answer to ``request``, and
        no location yet (None, not looked for)."""
        d = self.digester
        if type(result) is str and len(result) <= _MEMO_JSON and d.strips(name):
            # The tool's results always lose their volatile keys: the canonical form is then
            # a function of the text alone, kept for a text seen recently.
            memo = self._json_results
            canonical = memo.get(result)
            if canonical is None:
                canonical = d.result(result, name)
                if len(memo) >= _MEMO_JSON_ENTRIES:
                    memo.clear()
                memo[result] = canonical
            result_bytes, parsed = canonical
        else:
            result_bytes, parsed = d.result(result, name)
        error = call.error
        if run is not None and type(parsed) is dict and not error and parsed:
            opaque = opaque_fields(parsed) if len(parsed) <= _MAX_LEARN_KEYS else None
            if run.memory is not None or opaque:  # (has_opaque(parsed), computed once)
                result_bytes = self._learned(self.memory(run), name, request, parsed, result_bytes, opaque)
        elif run is not None and type(parsed) is str and not error:
            same_as = (run.opaque or self._opaque(run)).text_to_digest(name, request, parsed)  # (opaque tokens)
            if same_as is not None:
                result_bytes = d.result(same_as, name)[0]
        empty = is_empty(parsed)
        incidental = False
        if run is not None and not empty and not error and (
                type(parsed) is str or (type(parsed) is dict and (run.memory is not None or parsed))):
            incidental = self.memory(run).reworded(name, request, parsed)
        return (d.local(result_bytes), parsed, empty, empty and is_silent(parsed),
                not error and not empty and is_ack(parsed), incidental, None, False)

    @staticmethod
    def memory(run: RunState) -> ResultMemory:
        """The run's memory of recent results, made on first use."""
        memory = run.memory
        if memory is None:
            memory = run.memory = ResultMemory()
        return memory

    def _learned(self, memory: ResultMemory, name: str, request: int, parsed: dict[str, Any],
                 result_bytes: bytes, opaque: dict[Field, Any] | None = None) -> bytes:
        """The canonical bytes of a JSON-object result without the fields learned volatile
        for its tool (learning from this result first; ``opaque``: its opaque fields, when
        already known)."""
        d = self.digester

        def rest(fields: frozenset[Field]) -> int:
            return d.local(d.result(without(parsed, fields), name)[0])

        memory.learn(name, request, parsed, rest, opaque)
        if memory.learned and name in memory.learned:
            return d.result(memory.strip(name, parsed), name)[0]
        return result_bytes
