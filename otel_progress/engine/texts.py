"""What texts alone determine, for the facts of a call (:mod:`.facts`): a tool name, an
argument text, a plain-text result, a failure (:class:`TextFacts`).

Each is a pure function of the text, computed once for a text seen recently (agents repeat
themselves: of the real calls, 43 % of argument texts, 48 % of results and 37 % of error
messages are exact repeats), in small tables emptied when full. What depends on the run
(learned fields, rewording, views) is computed per call by the
:class:`~otel_progress.engine.facts.FactBuilder`.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..evidence.canonical import Digester, failure_signature_text, folds_to_itself, normalise_action, parse_json_value
from ..evidence.content import command_of, is_ack, is_deliberate_wait, is_empty, is_silent
from ..evidence.generic import uninformative_failure
from ..evidence.location import Location, LocationReader
from .config import Config
from .digests import MASK

__all__ = ["MEMO_TEXT", "Request", "TextFacts", "TextResult", "Tool"]

_SEP = b"\x1f"
_MAX_TOOLS = 1024  # tool names whose derived facts TextFacts.tool keeps
MEMO_TEXT = 8192  # argument texts and plain-text results up to this size are remembered
_MEMO_ENTRIES = 1024  # ... this many of each
_MEMO_MESSAGE = 16384  # failures whose message is up to this size are remembered ...
_MEMO_ERRORS = 256  # ... this many
_SORT = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS  # as canonical.py encodes
#: Per tool name (TextFacts.tool): call-digest prefix, action prefix, manifest wait tool.
Tool = tuple[bytes, bytes | None, bool]
#: What a request's arguments determine (TextFacts.request): the parsed arguments, the
#: command, the request digest, the action digest, whether it waits on purpose, and the
#: location the request names.
Request = tuple[Any, str | None, int, int | None, bool, Location | None]
#: What a plain-text result determines (TextFacts.text_result): its digest, whether it is
#: empty, silent, and a bare acknowledgement.
TextResult = tuple[int, bool, bool, bool]


class TextFacts:
    """What tool names, argument texts, plain-text results and failures alone determine,
    with the bounded tables of the texts seen recently."""

    def __init__(self, config: Config, digester: Digester, want_action: bool, locations: LocationReader) -> None:
        """``want_action``: whether the normalised action's digest is wanted (a signal uses
        the state signature); ``locations``: the reader of the locations requests name."""
        self.digester = digester
        self.locations = locations
        self._want_action = want_action
        self._wait_tools = frozenset(n for n, s in config.manifest.items() if s.kind == "wait")
        #: The manifest's tools that declare what identifies a request (identity, ignore).
        self._identities = {n: s for n, s in config.manifest.items() if s.declares_identity}
        #: Tool name -> :data:`Tool` (see :meth:`tool`).
        self.tools: dict[str, Tool] = {}
        self._requests: dict[tuple[str, str], Request] = {}
        self._texts: dict[str, TextResult] = {}
        self._errors: dict[tuple[str, str | None, str | None], tuple[str, bool]] = {}

    def tool(self, name: str) -> Tool:
        """What a call's facts derive from a tool name alone, computed once per name (a
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
        tools = self.tools
        if len(tools) >= _MAX_TOOLS:
            tools.clear()
        tools[name] = tool
        return tool

    def request(self, name: str, arguments: Any, call_prefix: bytes, action_prefix: bytes | None) -> Request:
        """What a call's arguments determine (:meth:`_request`), kept for argument texts
        that came back before (agents repeat themselves)."""
        if type(arguments) is str and len(arguments) <= MEMO_TEXT:
            memo = self._requests
            request = memo.get((name, arguments))
            if request is None:
                request = self._request(name, arguments, call_prefix, action_prefix)
                if len(memo) >= _MEMO_ENTRIES:
                    memo.clear()
                memo[(name, arguments)] = request
            return request
        return self._request(name, arguments, call_prefix, action_prefix)

    def _request(self, name: str, arguments: Any, call_prefix: bytes,
                 action_prefix: bytes | None) -> Request:
        """What a call's arguments alone determine (:meth:`request` keeps it for argument
        texts that came back before: agents repeat themselves): the parsed arguments, the
        command they carry, the request digest (name and canonical arguments), the digest
        of the normalised action (None when the state signature is off, or the name cannot
        be normalised: the call's facts then fail where they need it), whether the command
        waits on purpose, and the location the request names (location.py)."""
        args = parse_json_value(arguments)
        # What identifies the request: the arguments, or the part the manifest declares.
        ident = self.identity(name, args)
        try:  # d.arguments(ident), without its second look at the already parsed value
            args_bytes = orjson.dumps(ident, option=_SORT)
        except TypeError:  # (orjson.JSONEncodeError is one)
            args_bytes = self.digester.arguments(ident)
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
                action = hash(normalise_action(name, ident)) & MASK
        waits = command is not None and is_deliberate_wait(command)
        return (args, command, self.digester.digest(call_prefix + args_bytes), action, waits,
                self.locations.request(args))

    def identity(self, name: str, args: Any) -> Any:
        """The part of ``name``'s parsed arguments that identifies a request: all of them,
        unless the manifest declares the tool's ``identity`` or ``ignore`` paths."""
        spec = self._identities.get(name) if self._identities else None
        return args if spec is None else spec.request_identity(args)

    def text_result(self, text: str) -> TextResult:
        """:meth:`text_result_of`, kept for plain texts that came back before."""
        memo = self._texts
        text_facts = memo.get(text)
        if text_facts is None:
            text_facts = self.text_result_of(text)
            if len(memo) >= _MEMO_ENTRIES:
                memo.clear()
            memo[text] = text_facts
        return text_facts

    def text_result_of(self, text: str) -> TextResult:
        """What a plain-text result alone determines: its digest, whether it is empty,
        silent, and a bare acknowledgement (the text path of :meth:`Digester.result` and
        the content checks, as a call's facts apply them)."""
        result_bytes, parsed = self.digester.result(text)
        empty = is_empty(parsed)
        return self.digester.local(result_bytes), empty, empty and is_silent(parsed), not empty and is_ack(parsed)

    def failure(self, name: str, error_type: str | None, output: str | None) -> tuple[str, bool]:
        """A failure's identity text (tool, type and its whole ``output``: the captured
        result, else the message) and whether it says nothing about the failure (generic.py);
        both functions of the tool, type and output alone, remembered for the failures seen
        last (an agent stuck on a failure sends it again and again)."""
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
