"""docs/service.md documents every option (flag, variable, default) and every metric."""

from __future__ import annotations

from pathlib import Path

from otel_progress.service.metrics import METRICS
from otel_progress.service.options import describe

DOC = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text()


def test_every_option_is_documented():
    for flag, env, default, _help in describe():
        row = next((line for line in DOC.splitlines() if line.startswith(f"| `{flag}` |")), None)
        assert row is not None, flag
        assert f"`{env}`" in row and default.strip("'") in row, row


def test_every_metric_is_documented():
    for m in METRICS:
        assert f"`{m.name}`" in DOC and f"`{m.prom_name}`" in DOC, m.name
