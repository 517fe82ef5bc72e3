"""The labelled corpus: agent runs stored as YAML, loaded into :class:`Run` objects.

Each file in ``bench/quality/corpus/`` holds ``runs:``, a list of run records (see
``bench/quality/README.md`` for every field). A record's ``turns`` list is expanded here:
``repeat`` blocks with ``vars`` and ``{i}`` placeholders, ``parallel`` batches, sub-agent
segments (``agent:``), and the timing and token figures each turn gets. The result is
the one representation every consumer uses: the OTLP/JSON generator (``otlp.py``), the
baselines, the labelling rules (``rules.py``) and the scoreboard.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "CORPUS_DIR",
    "Call",
    "CorpusError",
    "ErrorInfo",
    "Invocation",
    "Run",
    "Step",
    "load_corpus",
    "load_file",
    "make_run",
]

CORPUS_DIR = Path(__file__).with_name("corpus")

LABELS = ("stuck", "healthy")
RULES = (
    "cycle",
    "nothing-new",
    "same-failure",
    "same-request-failure",
    "state-cycle",
    "signature",
    "lap",
    "measure",
    "wait-budget",
    "poll-after-terminal",
)

_RUN_KEYS = frozenset({
    "id", "label", "category", "source", "note", "rule", "earliest_turn", "capture", "config",
    "agent", "interval", "chat_seconds", "tokens", "turns", "conclusion",
})
_CALL_KEYS = frozenset({
    "call", "args", "result", "error", "state", "node", "measure", "duration", "failure",
})
_TURN_KEYS = _CALL_KEYS | {"parallel", "agent", "after", "input_tokens", "repeat", "vars", "turns"}
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)(?:([*+\-])(\d+))?\}")


class CorpusError(ValueError):
    """A corpus record that cannot be used; the message names the file and run."""


@dataclass(frozen=True)
class ErrorInfo:
    """A failed tool call: the error type and message an instrumentation records."""

    type: str
    message: str


@dataclass(frozen=True)
class Call:
    """One tool call, as the agent harness saw it."""

    name: str
    args: Any  # a mapping (key order as the model emitted it), or None
    result: Any  # a string, mapping or list; None when the call returned nothing
    error: ErrorInfo | None = None
    state: str | None = None  # published working-state digest (progress.state)
    node: str | None = None  # plan node (progress.plan.node)
    measure: float | None = None  # published monotone measure (progress.measure)
    duration: float = 0.8  # seconds
    failure: str | None = None  # label-side note: the result reports this failure

    @property
    def args_text(self) -> str:
        """The arguments as the model emitted them: JSON, key order preserved."""
        return "" if self.args is None else json.dumps(self.args, ensure_ascii=False)

    @property
    def result_text(self) -> str | None:
        """The result as a tool returns it to the model (text, or JSON of a structure)."""
        if self.result is None:
            return None
        if isinstance(self.result, str):
            return self.result
        return json.dumps(self.result, ensure_ascii=False)


@dataclass(frozen=True)
class Step:
    """One turn: the calls of one model response (several when they ran in parallel)."""

    turn: int  # 1-based, across the whole run (all agents, in time order)
    calls: tuple[Call, ...]
    agent: str  # the agent that made the calls
    invocation: int  # 0: the root agent; 1..: sub-agent invocations in order
    start: float  # seconds from the run start: the model call before the tools
    chat_seconds: float
    input_tokens: int
    output_tokens: int

    @property
    def tools_start(self) -> float:
        return self.start + self.chat_seconds

    @property
    def end(self) -> float:
        return self.tools_start + 0.05 * (len(self.calls) - 1) + max(c.duration for c in self.calls)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class Invocation:
    """One agent invocation (an ``invoke_agent`` span): the root, or a sub-agent."""

    index: int
    agent: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Run:
    """One labelled agent run."""

    id: str
    label: str
    category: str
    source: str
    note: str
    rules: tuple[str, ...]
    earliest_turn: int | None
    capture: bool
    config: Mapping[str, Any] | None
    agent: str
    steps: tuple[Step, ...]
    file: str
    conclusion: bool = True  # the root agent ends with a final model call
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def stuck(self) -> bool:
        return self.label == "stuck"

    @property
    def turns(self) -> int:
        return len(self.steps)

    @property
    def duration(self) -> float:
        return self.steps[-1].end if self.steps else 0.0

    @property
    def multi_agent(self) -> bool:
        return any(s.invocation for s in self.steps)

    def invocations(self) -> list[Invocation]:
        """The root invocation first, then each sub-agent invocation in time order."""
        groups: dict[int, list[Step]] = {}
        agents: dict[int, str] = {}
        for step in self.steps:
            groups.setdefault(step.invocation, []).append(step)
            agents[step.invocation] = step.agent
        if 0 not in groups:
            groups[0] = []
            agents[0] = self.agent
        return [Invocation(i, agents[i], tuple(groups[i])) for i in sorted(groups)]

    def calls(self) -> Iterator[tuple[Step, Call]]:
        for step in self.steps:
            for call in step.calls:
                yield step, call


# -- expansion ------------------------------------------------------------------------


def _substitute(value: Any, env: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        whole = _PLACEHOLDER.fullmatch(value)
        if whole and whole.group(1) in env and whole.group(2) is None:
            return env[whole.group(1)]

        def repl(m: re.Match[str]) -> str:
            name, op, num = m.group(1), m.group(2), m.group(3)
            if name not in env:
                return m.group(0)
            v = env[name]
            if op is not None:
                if not isinstance(v, int):
                    return m.group(0)
                n = int(num)
                v = v * n if op == "*" else v + n if op == "+" else v - n
            return str(v)

        return _PLACEHOLDER.sub(repl, value)
    if isinstance(value, Mapping):
        return {_substitute(k, env): _substitute(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, env) for v in value]
    return value


def _expand(turns: Any, env: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    if not isinstance(turns, list):
        raise CorpusError(f"{where}: 'turns' must be a list")
    out: list[dict[str, Any]] = []
    for n, turn in enumerate(turns, 1):
        here = f"{where} turn entry {n}"
        if not isinstance(turn, Mapping):
            raise CorpusError(f"{here}: expected a mapping")
        unknown = set(turn) - _TURN_KEYS
        if unknown:
            raise CorpusError(f"{here}: unknown keys {sorted(unknown)}")
        if "repeat" in turn:
            count = turn["repeat"]
            if not isinstance(count, int) or count < 1:
                raise CorpusError(f"{here}: 'repeat' must be a whole number >= 1")
            variables = turn.get("vars") or {}
            for name, values in variables.items():
                if not isinstance(values, list) or not values:
                    raise CorpusError(f"{here}: vars.{name} must be a non-empty list")
            body = {k: v for k, v in turn.items() if k not in ("repeat", "vars")}
            for i in range(count):
                inner = dict(env)
                inner.update({"i": i + 1, "i0": i})
                for name, values in variables.items():
                    inner[name] = values[i % len(values)]
                if "turns" in body:
                    out.extend(_expand(body["turns"], inner, here))
                else:
                    out.append(_substitute(body, inner))
        elif "turns" in turn:
            out.extend(_expand(turn["turns"], env, here))
        else:
            out.append(_substitute(dict(turn), env))
    return out


def _error(value: Any, where: str) -> ErrorInfo | None:
    if value is None:
        return None
    if isinstance(value, str):
        return ErrorInfo("ToolError", value)
    if isinstance(value, Mapping) and "message" in value:
        return ErrorInfo(str(value.get("type", "ToolError")), str(value["message"]))
    raise CorpusError(f"{where}: 'error' must be a message or {{type, message}}")


def _call(entry: Mapping[str, Any], where: str) -> Call:
    unknown = set(entry) - _CALL_KEYS - {"agent", "after", "input_tokens"}
    if unknown:
        raise CorpusError(f"{where}: unknown call keys {sorted(unknown)}")
    name = entry.get("call")
    if not isinstance(name, str) or not name:
        raise CorpusError(f"{where}: 'call' (the tool name) is required")
    error = _error(entry.get("error"), where)
    result = entry.get("result")
    if error is None and result is None:
        raise CorpusError(f"{where}: a call needs a 'result' or an 'error'")
    measure = entry.get("measure")
    return Call(
        name=name,
        args=entry.get("args", {}),
        result=result,
        error=error,
        state=None if entry.get("state") is None else str(entry["state"]),
        node=None if entry.get("node") is None else str(entry["node"]),
        measure=None if measure is None else float(measure),
        duration=float(entry.get("duration", 0.8)),
        failure=None if entry.get("failure") is None else str(entry["failure"]),
    )


def _parse_run(data: Mapping[str, Any], file: str) -> Run:
    rid = data.get("id")
    where = f"{file}: run {rid!r}"
    if not isinstance(rid, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", rid):
        raise CorpusError(f"{where}: 'id' must be lower-case letters, digits and dashes")
    unknown = set(data) - _RUN_KEYS
    if unknown:
        raise CorpusError(f"{where}: unknown keys {sorted(unknown)}")
    label = data.get("label")
    if label not in LABELS:
        raise CorpusError(f"{where}: 'label' must be one of {LABELS}")
    for key in ("category", "source", "note"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise CorpusError(f"{where}: '{key}' is required")
    rules_raw = data.get("rule", [])
    rules = (rules_raw,) if isinstance(rules_raw, str) else tuple(rules_raw)
    earliest = data.get("earliest_turn")
    if label == "stuck":
        if not rules or any(r not in RULES for r in rules):
            raise CorpusError(f"{where}: a stuck run needs 'rule' from {RULES}")
        if not isinstance(earliest, int) or earliest < 1:
            raise CorpusError(f"{where}: a stuck run needs 'earliest_turn' >= 1")
    elif earliest is not None or rules:
        raise CorpusError(f"{where}: a healthy run has no 'earliest_turn' or 'rule'")
    config = data.get("config")
    if config is not None and not isinstance(config, Mapping):
        raise CorpusError(f"{where}: 'config' must be a mapping of otel-progress settings")
    root = str(data.get("agent", "agent"))
    interval = float(data.get("interval", 6.0))
    chat_seconds = float(data.get("chat_seconds", 1.2))
    tokens = data.get("tokens") or {}
    base = int(tokens.get("base", 1800))
    growth = int(tokens.get("growth", 350))
    output = int(tokens.get("output", 120))

    entries = _expand(data.get("turns"), {}, where)
    if not entries:
        raise CorpusError(f"{where}: no turns")
    steps: list[Step] = []
    t = 0.0
    invocation = 0
    prev_agent = root
    sub_count = 0
    for n, entry in enumerate(entries, 1):
        here = f"{where} turn {n}"
        agent = str(entry.get("agent", root))
        if agent != root and agent != prev_agent:
            sub_count += 1
        invocation = 0 if agent == root else sub_count
        prev_agent = agent
        if "parallel" in entry:
            items = entry["parallel"]
            if not isinstance(items, list) or len(items) < 2:
                raise CorpusError(f"{here}: 'parallel' needs a list of two or more calls")
            calls = tuple(_call(c, f"{here} parallel {k}") for k, c in enumerate(items, 1))
        else:
            calls = (_call(entry, here),)
        if steps:
            gap = float(entry.get("after", interval))
            t = max(steps[-1].start + gap, steps[-1].end + 0.2)
        input_tokens = int(entry.get("input_tokens", base + growth * (n - 1)))
        steps.append(Step(n, calls, agent, invocation, round(t, 3), chat_seconds, input_tokens, output))
    run = Run(
        id=rid,
        label=label,
        category=str(data["category"]),
        source=str(data["source"]).strip(),
        note=" ".join(str(data["note"]).split()),
        rules=rules,
        earliest_turn=earliest,
        capture=bool(data.get("capture", True)),
        config=config,
        agent=root,
        steps=tuple(steps),
        file=file,
        conclusion=bool(data.get("conclusion", True)),
        raw=data,
    )
    if earliest is not None and earliest > run.turns:
        raise CorpusError(f"{where}: earliest_turn {earliest} is past the last turn ({run.turns})")
    return run


def make_run(run_id: str, turns: list[Any], *, label: str = "healthy", **fields: Any) -> Run:
    """A run built in code from turn entries in the corpus format (for tests)."""
    data: dict[str, Any] = {"id": run_id, "label": label, "category": "test", "source": "test",
                            "note": "test", "turns": turns}
    data.update(fields)
    return _parse_run(data, "<code>")


def load_file(path: str | Path) -> list[Run]:
    """The runs of one corpus file."""
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    if not isinstance(doc, Mapping) or not isinstance(doc.get("runs"), list):
        raise CorpusError(f"{path.name}: expected a mapping with a 'runs' list")
    return [_parse_run(r, path.name) for r in doc["runs"]]


def load_corpus(directory: str | Path | None = None, only: Sequence[str] | None = None) -> list[Run]:
    """Every run of the corpus, in file then record order; ``only`` keeps those ids."""
    directory = Path(directory) if directory is not None else CORPUS_DIR
    runs: list[Run] = []
    seen: set[str] = set()
    for path in sorted(directory.glob("*.yaml")):
        for run in load_file(path):
            if run.id in seen:
                raise CorpusError(f"{path.name}: run id {run.id!r} is used twice")
            seen.add(run.id)
            runs.append(run)
    if only:
        wanted = set(only)
        runs = [r for r in runs if r.id in wanted]
    return runs
