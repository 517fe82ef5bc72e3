"""The pipeline that turns a run's tool calls into steps and detections (the run's state
is :class:`~otel_progress.engine.runstate.RunState`).

Calls wait in a small reorder buffer (ordered by start time) until their step is known
to be complete; parallel calls from one model response (same parent span, overlapping in
time) become one step. Each step's digests are computed once, then the signals run in
order, cheap first, stopping at the first finding. A finding becomes a detection with an
escalation level; every signal then forgets the evidence of that loop, so the next
detection (the next level) must rest on new evidence. An ongoing loop is therefore not
re-announced each turn, and nothing is announced past level 3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import orjson

from ..evidence.canonical import Digester, failure_signature_text, folds_to_itself, normalise_action, parse_json_value
from ..evidence.content import (
    Field,
    ResultMemory,
    command_of,
    echoes_request,
    is_ack,
    is_deliberate_wait,
    is_empty,
    is_silent,
    may_be_waiting,
    opaque_fields,
    without,
)
from ..evidence.generic import bare_acknowledgement, uninformative_failure
from ..evidence.location import Location, LocationReader
from ..evidence.opaque import OpaqueText
from ..evidence.views import Views
from ..evidence.volatile import Answers, mask_volatile
from ..model import NOT_CAPTURED, Compaction, Detection, Finding, Level, Scope, ToolCall
from .config import Config
from .escalation import handoff_note, nudge_text
from .runstate import RunState, admit
from .signals import CallFacts, Signal, Step

__all__ = ["Pipeline"]

_SEP = b"\x1f"
_RAW_MIN = 512  # JSON results at least this long may be digested without parsing
_JSON_OPEN = ("{", "[")
_MASK = (1 << 63) - 1
_MAX_ATTEMPTS = 5
_MAX_TOOLS = 1024  # tool names whose derived facts Pipeline._tool keeps
_MAX_TOOLS_PER_RUN = 32  # tools whose last request a run remembers
_MEMO_TEXT = 8192  # argument texts and plain-text results up to this size are remembered
_MEMO_ENTRIES = 1024  # ... this many of each
_MEMO_JSON = 4096  # JSON results of a tool whose results are always stripped, up to this size ...
_MEMO_JSON_ENTRIES = 256  # ... this many (they are kept parsed)
_MAX_LEARN_KEYS = 32  # results with more top-level keys are never learned from (content.ResultMemory)
_MEMO_MESSAGE = 16384  # failures whose message is up to this size are remembered ...
_MEMO_ERRORS = 256  # ... this many
_TEXT_OPEN = ("{", "[", " ", "\n", "\t", "\r")  # a text parse_json_value may decode (not plain text)
_MASK_VOLATILE = partial(mask_volatile, opaque=False)  # (OpaqueText masks opaque tokens itself)
_SORT = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS  # as canonical.py encodes
#: Per tool name (Pipeline._tool): call-digest prefix, action prefix, manifest wait tool.
_Tool = tuple[bytes, bytes | None, bool]
#: What a request's arguments determine (Pipeline._request): the parsed arguments, the
#: command, the request digest, the action digest, whether it waits on purpose, and the
#: location the request names.
_Request = tuple[Any, str | None, int, int | None, bool, Location | None]
_FULL, _ARGUMENTS, _NAMES = "full", "arguments", "names"  # ToolCall.evidence_level


def _weakest_level(calls: Sequence[ToolCall]) -> str | None:
    """The weakest evidence level among a step's calls, or None when all are ``full``
    (a detection then carries no ``progress.evidence_level``)."""
    levels = {_ARGUMENTS if c.result_truncated and c.evidence_level == _FULL else c.evidence_level
              for c in calls}
    if levels == {_FULL} or not levels:  # (none: a compaction's detection, see Pipeline.compaction)
        return None
    if _NAMES in levels:
        return _NAMES
    if _ARGUMENTS in levels:
        return _ARGUMENTS
    return next(iter(levels - {_FULL}))


def _signature_text(parts: tuple[str, ...], actions: list[int]) -> str:
    """The text a state signature digests: goal, plan node, the action digests (sorted,
    for a batch of calls), the evidence part, the open obligations and ``blocked_on``."""
    goal, node, evidence_part, obligations, blocked_on = parts
    joined = str(actions[0]) if len(actions) == 1 else ",".join(str(a) for a in sorted(actions))
    return "\x1f".join((goal, node, joined, evidence_part, obligations, blocked_on))


def _signature_parts(run: RunState, call: ToolCall) -> tuple[str, str, str, str, str]:
    """The parts of a step's state signature other than its actions, from the step's
    (first) call: goal, plan node, evidence (published, else the run's evidence version,
    noting in ``run`` whether it changed since the last signature), obligations, blocker."""
    evidence = call.evidence
    if evidence is not None:
        evidence_part = "e:" + ",".join(sorted(evidence))
        run.derived_evidence_changed = False
    else:
        version = run.evidence_version
        evidence_part = f"v:{version}"
        run.derived_evidence_changed = version != run.sig_evidence_version
        run.sig_evidence_version = version
    obligations = ",".join(sorted(call.obligations)) if call.obligations else ""
    return (call.goal or "", call.node or "", evidence_part, obligations, call.blocked_on or "")


class Pipeline:
    """The signals in order plus the step construction and escalation they share."""

    def __init__(self, config: Config, signals: Sequence[Signal], digester: Digester) -> None:
        self.config = config
        self.signals = tuple(signals)
        self.digester = digester
        self._want_action = any(s.name in ("signature",) for s in self.signals)
        self._write_tools = frozenset(n for n, s in config.manifest.items() if s.kind == "write")
        self._wait_tools = frozenset(n for n, s in config.manifest.items() if s.kind == "wait")
        # The signals' evaluate methods, bound once (run_step calls each of them per step).
        self._evaluators = tuple(s.evaluate for s in self.signals)
        self._epoch_signals = tuple(i for i, s in enumerate(self.signals) if s.uses_epochs)
        self._boundary_signals = tuple(i for i, s in enumerate(self.signals) if s.uses_boundaries)
        self._tools: dict[str, _Tool] = {}
        # What argument texts (per tool) and plain-text results alone determine, for the
        # texts seen recently (bounded: emptied when full; see _request, _text_result).
        self._requests: dict[tuple[str, str], _Request] = {}
        self._texts: dict[str, tuple[int, bool, bool, bool]] = {}
        self._json_results: dict[str, tuple[bytes, Any]] = {}
        self._errors: dict[tuple[str, str | None, str | None], tuple[str, bool]] = {}
        self._locations = LocationReader()  # (with its tables of recent heads and URLs)
        waiting = config.waiting_values
        self._may_be_waiting: Callable[[str], bool] | None = (
            partial(may_be_waiting, waiting=waiting) if config.implicit_waits else None
        )

    # -- steps ------------------------------------------------------------------------

    def _tool(self, name: str) -> _Tool:
        """What :meth:`facts` derives from a tool name alone, computed once per name (a
        bounded table): the prefix of the bytes its call digest is taken of, the prefix of
        its normalised action (None when the lower-cased name cannot be encoded: the
        action is then built, and fails, where it is used, as it would without the table)
        and whether the manifest declares it a wait tool."""
        call_prefix = name.encode("utf-8", "surrogatepass") + _SEP
        try:
            action_prefix: bytes | None = name.strip().lower().encode("utf-8") + b":"
        except UnicodeEncodeError:
            action_prefix = None
        tool = (call_prefix, action_prefix, name in self._wait_tools)
        tools = self._tools
        if len(tools) >= _MAX_TOOLS:
            tools.clear()
        tools[name] = tool
        return tool

    def facts(self, call: ToolCall, run: RunState | None = None) -> CallFacts:
        """Compute the digests of one call (``run``: the run it belongs to, whose memory
        of recent results learns volatile fields and recognises reworded results)."""
        d = self.digester
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
            if type(arguments) is str and len(arguments) <= _MEMO_TEXT:
                memo = self._requests
                request = memo.get((name, arguments))
                if request is None:
                    request = self._request(name, arguments, call_prefix, action_prefix)
                    if len(memo) >= _MEMO_ENTRIES:
                        memo.clear()
                    memo[(name, arguments)] = request
            else:
                request = self._request(name, arguments, call_prefix, action_prefix)
            args, command, call_digest, args_action, waits, where = request
        else:
            args = command = args_action = where = None
            waits = False
            call_digest = d.digest(call_prefix)
        repeated = False
        if run is not None:
            requests = run.last_requests
            previous = requests.get(name)
            if previous is None and len(requests) >= _MAX_TOOLS_PER_RUN:
                requests.clear()
            requests[name] = call_digest
            repeated = previous == call_digest
        result_digest: int | None = None
        parsed: Any = None
        empty = True
        silent = False
        ack = False
        incidental = False
        located = None
        looked = False  # (whether the result's location was looked for already)
        if (type(result) is str and len(result) >= _RAW_MIN and result[:1] in _JSON_OPEN and not wait_tool
                and not repeated):
            # A long JSON result of a tool without volatile fields, with no waiting status
            # to parse for the implicit wait check, answering a request that is not a
            # repeat (where volatile fields are learned): digest it as received. It is
            # neither empty nor an acknowledgement, and carries no wait status.
            result_digest = d.raw_result(result, name, self._may_be_waiting)
            if result_digest is not None:
                empty = False
        if (result_digest is None and type(result) is str and len(result) <= _MEMO_TEXT and result
                and result[:1] not in _TEXT_OPEN):
            # Plain text (it cannot open a JSON document): what it says is a function of the
            # text alone, computed once for a text that came back before.
            memo = self._texts
            text_facts = memo.get(result)
            if text_facts is None:
                text_facts = self._text_result(result)
                if len(memo) >= _MEMO_ENTRIES:
                    memo.clear()
                memo[result] = text_facts
            result_digest, empty, silent, acked = text_facts
            parsed = result
            ack = acked and not call.error
            if run is not None and not call.error:
                same_as = (run.opaque or self._opaque(run)).text_to_digest(name, call_digest, result)
                if same_as is not None:
                    result_digest = self._text_result(same_as)[0]
            if run is not None and not empty and not call.error:
                located = self._locations.result(parsed, command is not None) or where
                looked = True
                if located is None or not located.view:  # (a view is judged at its location)
                    incidental = self.memory(run).reworded(name, call_digest, parsed)
        elif result_digest is None and result is not NOT_CAPTURED and not (call.error and result is None):
            result_digest, parsed, empty, silent, ack, incidental = self._result(call, run, name, call_digest, result)
        # Where the answer comes from (a page, a file, a position): an answer there that
        # shows nothing new stands for what the location showed (views.py).
        place: int | None = None
        if run is not None and result_digest is not None and not empty and not call.error:
            if not looked:
                located = self._locations.result(parsed, command is not None) or where
            if located is not None:
                views = run.views
                if views is None:
                    views = run.views = Views()
                result_digest, place = views.observe(located, call_digest, parsed, result_digest)
        error: int | None = None
        if call.error:
            message = call.error_message
            # A failure is what it says: its whole captured output, else its message.
            output = result if type(result) is str and result.strip() else message
            text, generic = self._failure(name, call.error_type, message, output)
            if generic:
                # A failure whose message says nothing about it (none, "Shell command
                # failed", "timed out"): the request is all that tells it from other
                # failures of the tool (each failing command its own signature), and an
                # answer that only repeats the message is no evidence of anything.
                text += "|" + str(call_digest)
                if result_digest is not None and (silent or type(parsed) is not str or parsed.strip() == (
                        message or "").strip()):
                    incidental = True
            error = d.text(text)
            if not generic and run is not None and output:
                # (the same failure but for volatile tokens: the failure it repeats)
                answers = run.answers or self._answers(run)
                error = answers.identity(f"{name}\x1f{call.error_type}", output, error, d.text, progress=True)
        # An argument-free request (go_back, next, scroll, undo) answered by a bare
        # acknowledgement ("Navigated back") that names no location moved something each
        # time: never the same step as another, a change of the world (generic.py).
        navigation = (has_args and not args and place is None and not call.error and type(parsed) is str
                      and bare_acknowledgement(parsed))
        # The turn key: the request and what came back. A failed call has no key: a retry
        # after a transient error is legitimate; repeated failures are judged by the
        # error-recurrence and state-signature signals instead.
        key: int | None = None
        if result_digest is not None and not call.error and not navigation:
            key = hash((call_digest, result_digest)) & _MASK
        action = None
        if self._want_action and (has_args or result_digest is not None) and not navigation:
            # The normalised action, for the state signature (see _request).
            if action_prefix is None:
                action_prefix = name.strip().lower().encode("utf-8") + b":"  # raises, as normalising would
            # (no arguments: normalise_action(name, None), folding leaves None as it is)
            action = args_action if has_args else hash(action_prefix + b"null") & _MASK
        world = navigation
        if not call.error and run is not None:
            if command is not None:
                world = self.memory(run).new_command(call_digest) and silent
            elif ack:
                world = world or not repeated
        # (positional, in CallFacts' field order: cheaper than keywords on this path)
        facts = CallFacts(name, key, call_digest, result_digest, parsed, empty, ack, error, action, args,
                          call.span_id, command is not None, silent, world, repeated,
                          waits and not call.error, waits, incidental, partial)
        if place is not None:
            facts.place = place
        if not has_args:
            pass  # (no captured request: what came back is compared with nothing)
        elif call.error:
            # A failed write (a request carrying its content) is about how it wrote, not
            # about what the world answers: the identical failing write is left to the
            # error signal. A failure of one line names no more than a status (_answer).
            output = result if type(result) is str and result.strip() else call.error_message
            facts.writes = writes = echoes_request(args, None)
            if not writes:
                facts.answer = error if output and "\n" in output.strip() else hash((error, call_digest)) & _MASK
        elif result_digest is not None and place is None and not (empty or partial or ack or navigation or facts.wait):
            # (an acknowledgement says the request was taken, not what the world answers; a
            # view is judged at its location, by the location signals: views.py)
            facts.answer = self._answer(run, name, args, parsed, result_digest, call_digest)
        return facts

    def _answer(self, run: RunState | None, name: str, args: Any, parsed: Any, result_digest: int,
                request: int) -> int | None:
        """What a successful call's answer is compared by (signals/answer.py): None for a
        write's own echo (the manifest's write tools, or a request that carries its
        content, content.echoes_request). A text of several lines (an output, a report, a
        traceback) is compared across requests, with its volatile tokens masked
        (volatile.py; opaque ones too for a tool learned to answer with them); a one-line
        text or a structured result names no more than a status or a value, whose meaning
        is the request's ("not enough balance" for another card is another fact), so it is
        compared only with the same request's answers."""
        if name in self._write_tools or echoes_request(args, parsed):
            return None
        if type(parsed) is not str or "\n" not in parsed.strip():
            return hash((result_digest, request)) & _MASK
        if run is None:
            return result_digest
        return (run.answers or self._answers(run)).identity(name, parsed, result_digest, self.digester.text)

    @staticmethod
    def _answers(run: RunState) -> Answers:
        """The run's memory of its tools' recent answers (made when first needed)."""
        answers = run.answers = Answers()
        return answers

    def _failure(self, name: str, error_type: str | None, message: str | None,
                 output: str | None) -> tuple[str, bool]:
        """A failure's identity text (its whole normalised ``output``: the captured result,
        else the message), and whether it says nothing about the failure (no output beyond
        a message that is generic, generic.py); both functions of the tool, type, message
        and output alone, remembered for the failures seen last (an agent stuck on a
        failure sends it again and again)."""
        if output is not None and len(output) > _MEMO_MESSAGE:
            return failure_signature_text(name, error_type, output), False  # (long: not generic)
        memo = self._errors
        key = (name, error_type, output)
        failure = memo.get(key)
        if failure is None:
            failure = (failure_signature_text(name, error_type, output),
                       uninformative_failure(output, error_type, name))
            if len(memo) >= _MEMO_ERRORS:
                memo.clear()
            memo[key] = failure
        return failure

    @staticmethod
    def _opaque(run: RunState) -> OpaqueText:
        """The run's table of the tools whose plain-text answers carry opaque tokens (made
        when first needed): :meth:`OpaqueText.text_to_digest` gives the text to digest in
        place of such an answer, or None."""
        opaque = run.opaque = OpaqueText(_MASK_VOLATILE)
        return opaque

    def _request(self, name: str, arguments: Any, call_prefix: bytes,
                 action_prefix: bytes | None) -> _Request:
        """What a call's arguments alone determine (:meth:`facts` keeps it for argument
        texts that came back before: agents repeat themselves): the parsed arguments, the
        command they carry, the request digest (name and canonical arguments), the digest
        of the normalised action (None when the state signature is off, or the name cannot
        be normalised: :meth:`facts` then fails where it needs it), whether the command
        waits on purpose, and the location the request names (location.py)."""
        args = parse_json_value(arguments)
        try:  # d.arguments(args), without its second look at the already parsed value
            args_bytes = orjson.dumps(args, option=_SORT)
        except TypeError:  # (orjson.JSONEncodeError is one)
            args_bytes = self.digester.arguments(args)
        command = command_of(args) if type(args) is dict else None
        action: int | None = None
        if self._want_action and action_prefix is not None:
            # Its digest only tells actions apart inside this run, so it is process-local
            # (d.local); the signature exported with a detection is recomputed from keyed
            # BLAKE3 digests (exported_signature).
            if type(arguments) is str and folds_to_itself(args_bytes):
                # Arguments decoded from JSON text that folding would not change: their
                # canonical bytes are already the folded form (see folds_to_itself).
                action = hash(action_prefix + args_bytes) & _MASK
            else:
                action = hash(normalise_action(name, args)) & _MASK
        waits = command is not None and is_deliberate_wait(command)
        return (args, command, self.digester.digest(call_prefix + args_bytes), action, waits,
                self._locations.request(args))

    def _result(self, call: ToolCall, run: RunState | None, name: str, request: int,
                result: Any) -> tuple[int, Any, bool, bool, bool, bool]:
        """The facts of a result that is not plain text known to :meth:`facts`: its digest
        (without volatile and learned fields), the parsed result, whether it is empty,
        silent, a bare acknowledgement, and whether it rewords the tool's previous answer
        to ``request``."""
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
                not error and not empty and is_ack(parsed), incidental)

    def _text_result(self, text: str) -> tuple[int, bool, bool, bool]:
        """What a plain-text result alone determines: its digest, whether it is empty,
        silent, and a bare acknowledgement (the text path of :meth:`Digester.result` and
        the content checks, as :meth:`facts` applies them)."""
        result_bytes, parsed = self.digester.result(text)
        empty = is_empty(parsed)
        return self.digester.local(result_bytes), empty, empty and is_silent(parsed), not empty and is_ack(parsed)

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

    def _single_step(self, run: RunState, call: ToolCall) -> Step:
        """The next step of ``run`` when it is one call (the common case), with the run's
        per-step facts set: :meth:`make_step` and :meth:`_step_facts` in one pass, their
        general forms reduced to this call's own key, name, times, span and published
        attributes."""
        f = self.facts(call, run)
        run.turn = turn = run.turn + 1
        name = call.name
        wrote = name in self._write_tools and not call.error
        step = Step(turn, (call,), (f,), f.key, name, call.start_ns, call.end_ns, call.span_id, run.tokens,
                    0, False, wrote, world=f.world, partial=f.partial)
        plan_step = call.plan_step
        if plan_step is None:
            run.plan_advanced = False
        else:
            run.plan_advanced = plan_step != run.last_plan_step
            run.last_plan_step = plan_step
        goal_distance = call.goal_distance
        if goal_distance is None:
            run.goal_improved = False
        else:
            best = run.best_goal
            run.goal_improved = best is not None and goal_distance < best
            if best is None or goal_distance < best:
                run.best_goal = goal_distance
        state = call.state
        run.step_state = state
        if state is not None:
            if wrote and state == run.last_state:
                step.wrote = False  # see _step_facts
            run.last_state = state
        run.step_measure = call.measure
        node = call.node
        run.step_node = node
        action = f.action
        if action is not None and self._want_action:
            step.signature_parts = parts = _signature_parts(run, call)
            run.step_signature = hash(_signature_text(parts, [action])) & _MASK  # see _step_facts
        else:
            run.step_signature = None
        result = f.result
        if result is not None and not f.empty and not f.incidental:
            cap = self.config.max_evidence
            evidence_array = run.evidence
            if run.trace.evidence_run is not run or len(evidence_array) >= cap:
                run.trace.admit_from(run, result)
            if admit(evidence_array, result, cap):
                run.evidence_version += 1
                step.new_evidence = 1
        run.attempts.note(f.call, bool(call.error), name, f.args, _MAX_ATTEMPTS)
        return step

    def make_step(self, run: RunState, calls: list[ToolCall]) -> Step:
        """Build the next step of ``run`` from a complete group of parallel calls (a
        step of one call is built by :meth:`_single_step`)."""
        facts = tuple(self.facts(c, run) for c in calls)
        if any(f.key is None for f in facts):
            key = None
        else:
            key = self.digester.text(",".join(str(k) for k in sorted(f.key for f in facts)))  # type: ignore[type-var]
        last = max(calls, key=lambda c: c.end_ns)
        run.turn += 1
        return Step(
            turn=run.turn,
            calls=tuple(calls),
            facts=facts,
            key=key,
            tool="+".join(sorted({f.tool for f in facts})),
            start_ns=min(c.start_ns for c in calls),
            end_ns=last.end_ns,
            span_id=last.span_id,
            tokens=run.tokens,
            wrote=any(c.name in self._write_tools and not c.error for c in calls),
            world=any(f.world for f in facts),
            partial=any(f.partial for f in facts),
        )

    def _step_facts(self, run: RunState, step: Step) -> None:
        """Set the run's per-step facts (published attributes, evidence, signature) for a
        step of parallel calls."""
        calls = step.calls
        first = calls[0]
        plan_step = next((c.plan_step for c in reversed(calls) if c.plan_step is not None), None)
        goal_distance = next((c.goal_distance for c in calls if c.goal_distance is not None), None)
        state = next((c.state for c in reversed(calls) if c.state is not None), None)
        measure = next((c.measure for c in calls if c.measure is not None), None)
        run.plan_advanced = plan_step is not None and plan_step != run.last_plan_step
        if plan_step is not None:
            run.last_plan_step = plan_step
        run.goal_improved = False
        if goal_distance is not None:
            run.goal_improved = run.best_goal is not None and goal_distance < run.best_goal
            if run.best_goal is None or goal_distance < run.best_goal:
                run.best_goal = goal_distance
        run.step_state = state
        if state is not None:
            # A write is progress only if it changed the state, where a state is published.
            if step.wrote and state == run.last_state:
                step.wrote = False
            run.last_state = state
        run.step_measure = measure
        run.step_node = first.node
        # The signature is taken before the step's own results are admitted.
        run.step_signature = None
        facts = step.facts
        if self._want_action and all(f.action is not None for f in facts):
            step.signature_parts = parts = _signature_parts(run, first)
            # Process-local, like the action digests it is made of: equal when (and, but
            # for a 2**-63 collision, only when) the exported signature is, which digests
            # the same text with BLAKE3 action digests (exported_signature).
            run.step_signature = hash(_signature_text(parts, [f.action for f in facts])) & _MASK  # type: ignore[misc]
        cap = self.config.max_evidence
        trace = run.trace
        attempts = run.attempts
        for i, f in enumerate(facts):
            # Admit the result as evidence, to the trace and to the run (the trace first:
            # while it shares the run's evidence, it must see it as it was).
            result = f.result
            if result is not None and not f.empty and not f.incidental:
                if trace.evidence_run is not run or len(run.evidence) >= cap:
                    trace.admit_from(run, result)  # (else it shares the run's evidence: nothing to do)
                if admit(run.evidence, result, cap):
                    run.evidence_version += 1
                    step.new_evidence += 1
            # Remember the attempt for the handoff note.
            attempts.note(f.call, bool(calls[i].error), f.tool, f.args, _MAX_ATTEMPTS)

    def exported_signature(self, step: Step) -> int:
        """The state signature of ``step`` as exported with a detection: a keyed BLAKE3
        digest of the signature text with the keyed BLAKE3 digests of the normalised
        actions, stable across processes. Computed only when a detection reports it; the
        per-step comparisons use the process-local ``run.step_signature``."""
        assert step.signature_parts is not None
        d = self.digester
        actions = [d.digest(normalise_action(f.tool, f.args)) for f in step.facts]
        return d.text(_signature_text(step.signature_parts, actions))

    def run_step(self, run: RunState, calls: list[ToolCall]) -> Detection | None:
        """Evaluate one complete group of calls; return the detection to announce, if any."""
        if len(calls) == 1:
            step = self._single_step(run, calls[0])
        else:
            step = self.make_step(run, calls)
            self._step_facts(run, step)
        finding = None
        for evaluate, state in zip(self._evaluators, run.states, strict=True):
            finding = evaluate(step, state, run)
            if finding is not None:
                break
        # the epoch, after the signals (they judge a step by the epoch before it)
        if step.wrote or (step.world and run.step_state is None):
            run.epoch_world = True
        if step.new_evidence:
            run.epoch_evidence = True
        if run.epoch_world and run.epoch_evidence:
            run.epoch_world = run.epoch_evidence = False
            for i in self._epoch_signals:
                run.states[i] = self.signals[i].epoch_ended(run.states[i])
        return None if finding is None else self.escalate(run, step, finding)

    def compaction(self, run: RunState, compaction: Compaction) -> Detection | None:
        """The run's context was compacted after its steps so far (signals/compaction.py);
        the detection to announce, if any (on the compaction's record or span)."""
        finding = None
        for i in self._boundary_signals:
            found = self.signals[i].boundary(run.states[i], run, compaction)
            finding = finding or found
        if finding is None:
            return None
        at = compaction.time_ns
        step = Step(run.turn, (), (), None, "", at, at, compaction.span_id, run.tokens)
        return self.escalate(run, step, finding)

    def escalate(self, run: RunState, step: Step, finding: Finding) -> Detection | None:
        """Turn a finding into a detection with its level, and reset the signals."""
        run.detections += 1
        if run.first_detection_turn is None:
            run.first_detection_turn = step.turn
            run.first_detection_tokens = step.tokens
        for i, signal in enumerate(self.signals):
            run.states[i] = signal.reset(run.states[i])
        if run.level >= Level.PARK:
            return None  # parked: counted, not announced again
        # Levels 2 (restart) and 3 (park) stop or reset a run: they rest on the same loop
        # going on after the nudge (the same reason and, where the signal knows it, the
        # same thing repeating). Another loop is nudged afresh.
        loop = (finding.reason.value, finding.loop)
        run.level = run.level + 1 if loop == run.loop else 1
        run.loop = loop
        level = Level(run.level)
        figures = finding.figures
        evidence_level = _weakest_level(step.calls)
        if evidence_level is not None:
            figures = {**figures, "evidence_level": evidence_level}
        return Detection(
            reason=finding.reason,
            turn=step.turn,
            level=level,
            scope=Scope.AGENT,
            trace_id=run.trace.trace_id,
            span_id=step.span_id,
            run_id=run.run_id,
            agent=run.agent,
            tool=step.tool,
            figures=figures,
            nudge=nudge_text(finding, level, step.turn, run.first_detection_turn),
            handoff=handoff_note(finding, step.turn, run.attempts),
            tokens=step.tokens,
        )
