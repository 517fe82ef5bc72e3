"""The escalation ladder's texts (seed 004): a nudge that states what was observed and asks
for a falsifiable hypothesis (never fix advice), and a handoff note for a fresh restart
listing what was tried, built from the call fingerprints.

Neither text carries raw arguments or results: only tool names, argument names, counts
and digests, so they are safe to export with the detection.
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import Finding, Level

__all__ = ["Attempt", "handoff_note", "nudge_text"]

_HYPOTHESIS = (
    "Before calling another tool, write down what you believe is blocking progress and"
    " what observation would prove that belief wrong."
)


class Attempt:
    """One distinct call the run made: its shape (tool and argument names), fingerprint,
    how often it ran, and how often it failed."""

    __slots__ = ("call", "count", "failures", "shape")

    def __init__(self, shape: str, call: int) -> None:
        self.shape = shape
        self.call = call
        self.count = 0
        self.failures = 0

    @property
    def fingerprint(self) -> str:
        """Eight hex digits of the call's digest."""
        return f"{self.call:016x}"[:8]


def nudge_text(finding: Finding, level: Level, turn: int, first_turn: int | None) -> str:
    """The message a harness injects into the agent's next turn."""
    observed = finding.observed or f"no progress ({finding.reason.value})"
    text = f"Progress watchdog notice (turn {turn}): {observed}. {_HYPOTHESIS}"
    if level is Level.RESTART:
        text += (
            f" This run was already notified at turn {first_turn} and the pattern came back;"
            " a harness should restart it from the handoff note."
        )
    elif level is Level.PARK:
        text += (
            " The pattern has persisted through earlier notices; a harness should park this"
            " task for human review."
        )
    return text


def handoff_note(finding: Finding, turn: int, attempts: Iterable[Attempt]) -> str:
    """The note a fresh agent gets: what was tried and did not work."""
    lines = [
        f"Previous attempt stalled at turn {turn} ({finding.reason.value}):"
        f" {finding.observed or 'no progress'}.",
        "What was tried and did not work:",
    ]
    tried = sorted(attempts, key=lambda a: -a.count)
    for attempt in tried[:8]:
        line = f"- {attempt.shape} [{attempt.fingerprint}] ×{attempt.count}"
        if attempt.failures:
            line += f", failed {attempt.failures}×"
        lines.append(line)
    if not tried:
        lines.append("- (no comparable calls were recorded)")
    lines.append(
        "Do not retry these unchanged. Start by checking the assumption behind them against"
        " the task."
    )
    return "\n".join(lines)
