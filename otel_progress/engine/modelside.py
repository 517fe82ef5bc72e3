"""The model's side of a run: the model-side signals' part of the pipeline
(:class:`ModelSide`), and what the engine remembers between a run's model outputs
(:class:`ModelRun`), made on its first one or its first refused call (a run that never
reports one carries ``None``).

It holds the model-side signals' states (:mod:`.signals.model_base`) and the bookkeeping
they share:

* **what is new**: a counter of the tool steps that made progress (a result the run had
  not seen, a write, a change of the world, a plan or goal advance), bumped by the
  pipeline, and the latest user message (``ModelOutput.prompt``): a model step has news
  when the counter moved or the user asked something new since the previous model step;
* **which requests were answered**: the requests of the latest output wait for an answer
  (:attr:`ModelRun.open`) and are judged when the run's next output arrives; an answer is
  an executed tool call (or a refused one) of the run, matched by the tool-call id when
  both sides carry one, else by the tool name and canonical arguments (the name alone
  when either side's arguments were not captured), and started after the request was made.
  Each answer answers one request, so parallel requests are matched each.

Memory is bounded: the latest 64 calls the run executed or refused, and the requests of
one output (the first 64).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..evidence.canonical import Digester
from ..model import NOT_CAPTURED, Detection, Finding, ModelOutput, ToolCall, ToolRequest
from .signals.model_base import CAUSE_REFUSED, CAUSE_UNANSWERED, ModelSignal, ModelStep, Unexecuted
from .step import Step

if TYPE_CHECKING:
    from .runstate import RunState

__all__ = ["ModelRun", "ModelSide", "request_digest"]

_MAX_CALLS = 64  # executed or refused calls remembered (the answers a request is matched with)
_MAX_REQUESTS = 64  # requests of one output that wait for an answer


def _has_arguments(arguments: Any) -> bool:
    return arguments is not NOT_CAPTURED and arguments is not None


def request_digest(digester: Digester, name: str, arguments: Any) -> int:
    """The process-local digest of a request: the tool name and its canonical arguments
    (key order and spacing never matter; arguments not captured digest as none, arguments
    that cannot be canonicalised by their type)."""
    try:
        canonical = digester.arguments(arguments) if _has_arguments(arguments) else b"-"
    except Exception:  # (bad input: never raise) an odd object, a cycle: its type stands for it
        canonical = repr(type(arguments)).encode()
    return digester.local(name.encode("utf-8", "surrogatepass") + b"\x1f" + canonical)


class _Call:
    """A call of the run that executed or was refused: a possible answer to a request."""

    __slots__ = ("call_id", "has_args", "name", "refused", "request", "seq", "start_ns")

    def __init__(self, call: ToolCall, request: int, seq: int, refused: bool) -> None:
        self.call_id = call.call_id or None
        self.request = request
        self.name = call.name
        self.has_args = _has_arguments(call.arguments)
        self.start_ns = call.start_ns
        self.seq = seq
        self.refused = refused


class _Request:
    """A request of the latest output, waiting for an answer."""

    __slots__ = ("call_id", "has_args", "name", "request", "seq", "start_ns")

    def __init__(self, name: str, request: int, call_id: str | None, has_args: bool, start_ns: int,
                 seq: int) -> None:
        self.name = name
        self.request = request
        self.call_id = call_id or None
        self.has_args = has_args
        self.start_ns = start_ns
        self.seq = seq

    def answered_by(self, call: _Call) -> bool:
        """Whether ``call`` answers this request (module docstring)."""
        if self.call_id is not None and call.call_id is not None:
            return self.call_id == call.call_id
        if call.request != self.request and not (
                (not self.has_args or not call.has_args) and call.name == self.name):
            return False
        if self.start_ns and call.start_ns:
            return call.start_ns >= self.start_ns
        return call.seq >= self.seq  # (times unknown: a call the engine saw after the output)


class ModelRun:
    """One run's model side (module docstring)."""

    __slots__ = ("calls", "mark", "open", "progress", "prompt", "seq", "states")

    def __init__(self, signals: Sequence[ModelSignal]) -> None:
        self.states: list[Any] = [s.new_state() for s in signals]
        self.progress = 0  # tool steps of the run that made progress (the pipeline counts them)
        self.mark = 0  # progress at the previous model step
        self.prompt: int | None = None  # hash of the latest user message seen
        self.calls: list[_Call] = []  # the latest calls executed or refused
        self.open: list[_Request] = []  # the latest output's requests, waiting for an answer
        self.seq = 0  # model outputs so far

    def note_call(self, call: ToolCall, request: int, refused: bool = False) -> None:
        """Remember a call the run executed (or refused): it may answer a request."""
        calls = self.calls
        if len(calls) >= _MAX_CALLS:
            del calls[0]
        calls.append(_Call(call, request, self.seq, refused))

    def news(self, prompt: str | None) -> bool:
        """Whether something new reached the run since the previous model step (module
        docstring); the step's ``prompt`` becomes the latest user message."""
        news = self.progress != self.mark
        self.mark = self.progress
        if prompt is not None:
            seen = hash(" ".join(prompt.split()))
            if self.prompt is not None and seen != self.prompt:
                news = True
            self.prompt = seen
        return news

    def unanswered(self) -> tuple[Unexecuted, ...]:
        """Judge the latest output's requests now that the model answered again: those no
        call answered (a refused one was counted when its refusal arrived)."""
        if not self.open:
            return ()
        used: set[int] = set()
        out: list[Unexecuted] = []
        calls = self.calls
        for request in self.open:
            for i, call in enumerate(calls):
                if i not in used and request.answered_by(call):
                    used.add(i)
                    break
            else:
                out.append(Unexecuted(request.request, request.name, CAUSE_UNANSWERED))
        self.open = []
        return tuple(out)

    def expect(self, digester: Digester, output: ModelOutput) -> None:
        """The output's requests now wait for an answer (judged at the next output)."""
        self.seq += 1
        requests = output.requests if isinstance(output.requests, (tuple, list)) else ()
        self.open = [
            _Request(r.name, request_digest(digester, r.name, r.arguments),
                     r.call_id if isinstance(r.call_id, str) else None,
                     _has_arguments(r.arguments), output.start_ns, self.seq)
            for r in requests[:_MAX_REQUESTS]
            if isinstance(r, ToolRequest) and isinstance(r.name, str) and r.name
        ]


class ModelSide:
    """The model side of the pipeline: the model-side signals in order, the steps they
    evaluate and the bookkeeping the run's tool steps feed them.

    Args:
        signals: the enabled model-side signals.
        digester: the engine's digester (request digests).
        escalate: the pipeline's escalation (``Pipeline.escalate``): a finding climbs the
            same ladder as every other reason.
    """

    def __init__(self, signals: Sequence[ModelSignal], digester: Digester,
                 escalate: Callable[[RunState, Step, Finding], Detection | None]) -> None:
        self.signals = tuple(signals)
        self.digester = digester
        self._escalate = escalate

    def run_of(self, run: RunState) -> ModelRun:
        """The run's model side, made on first use."""
        model = run.model
        if model is None:
            model = run.model = ModelRun(self.signals)
        return model

    def reset(self, model: ModelRun) -> None:
        """A detection was announced (by any signal): the model-side signals forget its
        evidence too."""
        for i, signal in enumerate(self.signals):
            model.states[i] = signal.reset(model.states[i])

    def note_executed(self, model: ModelRun, step: Step) -> None:
        """Remember a tool step's calls as answers to the model's requests, and tell the
        signals each request that ran."""
        digester = self.digester
        for call in step.calls:
            request = request_digest(digester, call.name, call.arguments)
            model.note_call(call, request)
            for signal, state in zip(self.signals, model.states, strict=True):
                signal.executed(state, request)

    def output(self, run: RunState, output: ModelOutput) -> Detection | None:
        """One model output of the run (the tool calls that started before it already
        evaluated): judge the previous output's requests, then run the signals; the
        detection to announce, if any, on the output's span, at the run's turn."""
        model = self.run_of(run)
        unexecuted = model.unanswered()
        news = model.news(output.prompt if isinstance(output.prompt, str) else None)
        model.expect(self.digester, output)
        step = ModelStep(output, news, unexecuted, run.turn, output.span_id, output.start_ns, output.end_ns)
        return self._evaluate(run, model, step)

    def refused(self, run: RunState, call: ToolCall) -> Detection | None:
        """A tool call the harness or the user refused (``executed`` False): an unexecuted
        request, never a step; the detection to announce, if any, on its span."""
        model = self.run_of(run)
        request = request_digest(self.digester, call.name, call.arguments)
        model.note_call(call, request, refused=True)
        step = ModelStep(None, model.news(None), (Unexecuted(request, call.name, CAUSE_REFUSED),), run.turn,
                         call.span_id, call.start_ns, call.end_ns)
        return self._evaluate(run, model, step)

    def _evaluate(self, run: RunState, model: ModelRun, step: ModelStep) -> Detection | None:
        finding = None
        for signal, state in zip(self.signals, model.states, strict=True):
            finding = signal.evaluate(step, state, run)
            if finding is not None:
                break
        if finding is None:
            return None
        tool = finding.figures.get("requested_tool", "")
        at = Step(step.turn, (), (), None, tool if isinstance(tool, str) else "", step.start_ns, step.end_ns,
                  step.span_id, run.tokens)
        return self._escalate(run, at, finding)
