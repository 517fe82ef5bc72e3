"""Re-implementations of the loop detectors users would otherwise pick, from their
documented rules in ``shared/research/peers.md`` (Pydantic AI Harness: from its source,
``pydantic_ai.py``), each behind :class:`~.base.Detector`."""

from __future__ import annotations

from .base import Alarm, Detector, Monitor
from .cline import Cline
from .crewai import CrewAIRepeatedInput
from .gemini_cli import GeminiCLI
from .goose import GooseRep002
from .openclaw import OpenClaw
from .opencode import OpenCode
from .openhands import OpenHandsV0, OpenHandsV1
from .openlit import OpenLIT
from .pydantic_ai import FingerprintGuard, PydanticLoopDetection
from .roo_code import RooCode
from .strict import StrictRepeat

__all__ = [
    "BASELINES",
    "Alarm",
    "Cline",
    "CrewAIRepeatedInput",
    "Detector",
    "FingerprintGuard",
    "GeminiCLI",
    "GooseRep002",
    "Monitor",
    "OpenClaw",
    "OpenCode",
    "OpenHandsV0",
    "OpenHandsV1",
    "OpenLIT",
    "PydanticLoopDetection",
    "RooCode",
    "StrictRepeat",
    "baselines",
]


def baselines() -> list[Detector]:
    """One instance of every baseline, with its documented defaults, in scoreboard order."""
    return [
        StrictRepeat(),
        CrewAIRepeatedInput(),
        OpenHandsV0(),
        OpenHandsV1(),
        GeminiCLI(),
        RooCode(),
        Cline(),
        OpenCode(),
        GooseRep002(),
        OpenClaw(),
        OpenLIT(),
        PydanticLoopDetection(),
    ]


BASELINES = tuple(type(d) for d in baselines())
