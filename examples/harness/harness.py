"""A harness that acts on detections (the escalation ladder of seed 004).

The harness registers ``on_detection`` on the processor. Level 1: it injects the nudge
into the agent's next turn. Level 2: it restarts the agent with a fresh context and the
handoff note. Level 3: it parks the task for a human and stops.

The agent is scripted: a code-fixing agent that edits and reverts the same fix while
the same test keeps failing, and that does not change its ways when nudged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_progress import Config, Detection, Level, ProgressSpanProcessor


class Parked(Exception):
    """Raised to stop the task: a human has to look at it."""


@dataclass
class Harness:
    pending_nudge: str | None = None
    restart_note: str | None = None
    log: list[str] = field(default_factory=list)
    parked: Detection | None = None

    def on_detection(self, det: Detection) -> None:
        # Called on the thread that ended the tool span: record what to do, act at the
        # agent's next step (never raise from here: the processor would count and drop it).
        self.log.append(f"turn {det.turn}: {det.reason.value} -> level {int(det.level)} {det.level.action}")
        if det.level is Level.NUDGE:
            self.pending_nudge = det.nudge
        elif det.level is Level.RESTART:
            self.restart_note = det.handoff
        else:
            self.parked = det


harness = Harness()
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(ProgressSpanProcessor(SimpleSpanProcessor(exporter), config=Config(),
                                                  on_detection=harness.on_detection))
tracer = provider.get_tracer("example.fixer")

EDITS = [("add null check at line 40", "tree:4be1"), ("revert null check, change default arg", "tree:77c0")]


def tool(name: str, arguments: dict[str, object], result: dict[str, object], state: str) -> None:
    with tracer.start_as_current_span(f"execute_tool {name}", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
        "gen_ai.tool.call.arguments": json.dumps(arguments),
        "gen_ai.tool.call.result": json.dumps(result),
        "progress.state": state,  # a digest of the working tree after the call
    }):
        pass


def work(context: list[str], steps: int) -> str:
    """The agent's loop for one context: returns why it stopped."""
    for step in range(steps):
        if harness.pending_nudge:
            context.append(harness.pending_nudge)
            print(f"  [harness] injected the nudge into the next turn (step {step + 1})")
            harness.pending_nudge = None
        if harness.parked is not None:
            return "parked"
        if harness.restart_note is not None:
            return "restart"
        change, tree = EDITS[step % 2]
        tool("edit_file", {"path": "src/exporter.py", "change": change}, {"ok": True}, tree)
        tool("run_tests", {"target": "tests/test_export.py"},
             {"failed": ["test_export_handles_empty_rows"]}, tree)
    return "done"


def main() -> int:
    task = "Fix test_export_handles_empty_rows."
    # One agent run for the task: a restart gives the agent a fresh context (the task and
    # the handoff note) inside the same run, so the watchdog's ladder keeps climbing.
    with tracer.start_as_current_span("invoke_agent fixer-agent", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "fixer-agent",
    }):
        context = [task]
        for attempt in range(1, 4):
            print(f"attempt {attempt}: the agent starts with {len(context)} context message(s)")
            outcome = work(context, steps=12)
            if outcome == "restart":
                print("  [harness] level 2: restart with a fresh context and the handoff note")
                context = [task, harness.restart_note or ""]
                harness.restart_note = None
                continue
            if outcome == "parked" and harness.parked is not None:
                print(f"  [harness] level 3: parked for human review at turn {harness.parked.turn}")
                print("  handoff for the reviewer:\n    " + harness.parked.handoff.replace("\n", "\n    "))
            break
    provider.shutdown()
    print("detections: " + "; ".join(harness.log))
    return 0 if harness.parked is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
