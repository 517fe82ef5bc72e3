"""One run's state: everything the engine remembers about an agent run between its calls
(:class:`RunState`).

The :class:`~otel_progress.engine.pipeline.Pipeline` builds a run's steps and runs the signals
over this state; each signal keeps its own part in :attr:`RunState.states`. The run state
knows the pipeline only through :class:`StepRunner` (it imports neither the pipeline nor
the signals: they depend on it).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..evidence.canonical import Digester
from ..evidence.content import ResultMemory
from ..evidence.opaque import OpaqueText
from ..evidence.views import Views
from ..evidence.volatile import Answers
from ..model import ToolCall
from .digests import holds
from .escalation import Attempts

if TYPE_CHECKING:
    from .modelside import ModelRun
    from .step import Step

__all__ = ["RunState", "StepRunner"]

_SEEN_IDS = 24  # span ids a run remembers (redelivered spans)


class _Stateful(Protocol):
    def new_state(self) -> Any: ...


class StepRunner(Protocol):
    """What a run state needs of the pipeline that runs its steps: the signals (each gives
    the run a fresh state of its own), the digester (a digest's exported form) and the
    exported state signature of a step."""

    @property
    def signals(self) -> Sequence[_Stateful]: ...

    @property
    def digester(self) -> Digester: ...

    def exported_signature(self, step: Step) -> int:
        """The state signature of ``step`` as exported with a detection."""
        ...


class RunState:
    """Everything the engine remembers about one agent run. Kept small: windows are
    bounded by the configuration, tables by fixed caps."""

    __slots__ = (
        "agent",
        "answers",
        "attempts",
        "best_goal",
        "derived_evidence_changed",
        "detections",
        "duplicates",
        "epoch_evidence",
        "epoch_world",
        "evidence",
        "evidence_version",
        "first_detection_tokens",
        "first_detection_turn",
        "first_waste_input",
        "goal_improved",
        "input_at_progress",
        "input_tokens",
        "last_plan_step",
        "last_requests",
        "last_state",
        "late",
        "level",
        "loop",
        "loop_evidence",
        "memory",
        "model",
        "opaque",
        "pending",
        "pipeline",
        "plan_advanced",
        "run_id",
        "seen",
        "seen_pos",
        "sig_evidence_version",
        "states",
        "step_measure",
        "step_node",
        "step_signature",
        "step_state",
        "tokens",
        "trace",
        "turn",
        "views",
        "watermark_ns",
    )

    def __init__(self, pipeline: StepRunner, trace: Any, run_id: str, agent: str | None) -> None:
        self.pipeline = pipeline
        self.trace = trace
        self.run_id = run_id
        self.agent = agent
        self.turn = 0
        self.tokens = 0
        self.level = 0
        self.answers: Answers | None = None  # the tools' recent answers (made on first use)
        self.loop: tuple[str, int | None] | None = None  # the loop last announced (reason, Finding.loop)
        self.loop_evidence = -1  # evidence_version at the last detection
        self.detections = 0
        self.first_detection_turn: int | None = None
        self.first_detection_tokens = 0
        self.input_tokens = 0  # the input tokens of the run's model calls (the context they read)
        self.input_at_progress = 0  # input_tokens when the run last made progress (new evidence, a write)
        self.first_waste_input = 0  # input_at_progress at the run's first detection
        self.states: list[Any] = [s.new_state() for s in pipeline.signals]
        self.evidence = array("q")  # sorted distinct result digests
        self.evidence_version = 0
        self.sig_evidence_version = -1
        self.last_plan_step: str | None = None
        self.last_state: str | None = None
        self.best_goal: float | None = None
        self.pending: list[ToolCall] = []
        self.seen = array("q", bytes(8 * _SEEN_IDS))
        self.seen_pos = 0
        self.watermark_ns = 0
        self.late = 0
        self.duplicates = 0
        self.attempts = Attempts()
        self.memory: ResultMemory | None = None  # made when first needed (FactBuilder.memory, engine/facts.py)
        self.views: Views | None = None  # what each location showed (made when first needed)
        self.opaque: OpaqueText | None = None  # tools whose texts carry opaque tokens (idem)
        # the model's side of the run (engine/modelside.py), made on its first model output
        # or refused call: most runs never have one
        self.model: ModelRun | None = None
        self.last_requests: dict[str, int] = {}  # tool -> digest of its last request
        # An epoch ends once the run has both changed the world (a write, a new command
        # that succeeded silently, an acknowledged new request) and admitted a result it
        # had never seen: a change and its effect (the frequency signal counts repeats
        # within an epoch). The two flags say which of the two happened in this epoch.
        self.epoch_world = False
        self.epoch_evidence = False
        # per-step facts, set by the pipeline before the signals run
        self.plan_advanced = False
        self.goal_improved = False
        self.step_state: str | None = None
        self.step_signature: int | None = None  # process-local (see Pipeline.exported_signature)
        self.step_measure: float | None = None
        self.step_node: str | None = None
        self.derived_evidence_changed = False

    def hex(self, digest: int) -> str:
        """The exported form of a digest."""
        return self.pipeline.digester.hex(digest)

    def exported_signature(self, step: Step) -> int:
        """The exported state signature of the current step (see
        :meth:`StepRunner.exported_signature`)."""
        return self.pipeline.exported_signature(step)

    @property
    def wasted_turns(self) -> int:
        """Turns taken after the run's first detection."""
        return 0 if self.first_detection_turn is None else self.turn - self.first_detection_turn

    @property
    def wasted_tokens(self) -> int:
        """Tokens consumed after the run's first detection."""
        return 0 if self.first_detection_turn is None else self.tokens - self.first_detection_tokens

    @property
    def wasted_input_tokens(self) -> int:
        """The input tokens of the model calls in the run's wasted stretch: from its last
        progress before the first detection to its end (each wasted step made the model read
        the whole context again)."""
        return 0 if self.first_detection_turn is None else self.input_tokens - self.first_waste_input

    def remember(self, span_id: str) -> bool:
        """Record a span id; False if it was seen recently (a redelivered span)."""
        h = hash(span_id) if span_id else 0
        if h and holds(self.seen, h):
            return False
        self.seen[self.seen_pos] = h
        self.seen_pos = (self.seen_pos + 1) % _SEEN_IDS
        return True
