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

import orjson

from ..evidence.canonical import Digester, error_signature_text, folds_to_itself, normalise_action, parse_json_value
from ..evidence.content import (
    Field,
    ResultMemory,
    command_of,
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
from ..model import NOT_CAPTURED, ToolCall
from .config import Config
from .digests import MASK
from .runstate import RunState
from .step import CallFacts

__all__ = ["FactBuilder"]

_SEP = b"\x1f"
_RAW_MIN = 512  # JSON results at least this long may be digested without parsing
_JSON_OPEN = ("{", "[")
_MAX_TOOLS = 1024  # tool names whose derived facts FactBuilder._tool keeps
_MAX_TOOLS_PER_RUN = 32  # tools whose last request a run remembers
_MEMO_TEXT = 8192  # argument texts and plain-text results up to this size are remembered
_MEMO_ENTRIES = 1024  # ... this many of each
_MEMO_JSON = 4096  # JSON results of a tool whose results are always stripped, up to this size ...
_MEMO_JSON_ENTRIES = 256  # ... this many (they are kept parsed)
_MAX_LEARN_KEYS = 32  # results with more top-level keys are never learned from (content.ResultMemory)
_MEMO_MESSAGE = 16384  # failures whose message is up to this size are remembered ...
_MEMO_ERRORS = 256  # ... this many
_TEXT_OPEN = ("{", "[", " ", "\n", "\t", "\r")  # a text parse_json_value may decode (not plain text)
_SORT = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS  # as canonical.py encodes
#: Per tool name (FactBuilder._tool): call-digest prefix, action prefix, manifest wait tool.
_Tool = tuple[bytes, bytes | None, bool]
#: What a request's arguments determine (FactBuilder._request): the parsed arguments, the
#: command, the request digest, the action digest, whether it waits on purpose, and the
#: location the request names.
_Request = tuple[Any, str | None, int, int | None, bool, Location | None]
_ARGUMENTS, _NAMES = "arguments", "names"  # ToolCall.evidence_level (see the pipeline)


class FactBuilder:
    """Computes the facts of each call (:meth:`facts`), with the tables of what recent
    tool names, argument texts, results and failures alone determine."""

    def __init__(self, config: Config, digester: Digester, want_action: bool) -> None:
        """``want_action``: whether a signal uses the state signature (the normalised
        action's digest is computed only then)."""
        self.digester = digester
        self._want_action = want_action
        self._wait_tools = frozenset(n for n, s in config.manifest.items() if s.kind == "wait")
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
            text, generic = self._failure(name, call.error_type, message)
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
            key = hash((call_digest, result_digest)) & MASK
        action = None
        if self._want_action and (has_args or result_digest is not None) and not navigation:
            # The normalised action, for the state signature (see _request).
            if action_prefix is None:
                action_prefix = name.strip().lower().encode("utf-8") + b":"  # raises, as normalising would
            # (no arguments: normalise_action(name, None), folding leaves None as it is)
            action = args_action if has_args else hash(action_prefix + b"null") & MASK
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
        return facts

    def _failure(self, name: str, error_type: str | None, message: str | None) -> tuple[str, bool]:
        """A failure's error signature text, and whether its message says nothing about it
        (generic.py); both functions of the tool, type and message alone, remembered for
        the failures seen last (an agent stuck on a failure sends it again and again)."""
        if message is not None and len(message) > _MEMO_MESSAGE:
            return error_signature_text(name, error_type, message), uninformative_failure(message, error_type, name)
        memo = self._errors
        key = (name, error_type, message)
        failure = memo.get(key)
        if failure is None:
            failure = (error_signature_text(name, error_type, message),
                       uninformative_failure(message, error_type, name))
            if len(memo) >= _MEMO_ERRORS:
                memo.clear()
            memo[key] = failure
        return failure

    @staticmethod
    def _opaque(run: RunState) -> OpaqueText:
        """The run's table of the tools whose plain-text answers carry opaque tokens (made
        when first needed): :meth:`OpaqueText.text_to_digest` gives the text to digest in
        place of such an answer, or None."""
        opaque = run.opaque = OpaqueText()
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
                action = hash(action_prefix + args_bytes) & MASK
            else:
                action = hash(normalise_action(name, args)) & MASK
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
