"""The real Codex CLI compacting its conversation against the scripted Responses API.

Codex compacts a custom provider's conversation itself when the last response's input
tokens pass ``model_auto_compact_token_limit`` (``config.toml``): it asks the model for a
handoff summary (``You are performing a CONTEXT CHECKPOINT COMPACTION``) and goes on from
it. Its telemetry at 0.171.0 says so only as a metric, ``codex.task.compact`` (a counter
with ``type = local``, ``manual``, ``model``, ``originator``, ``session_source``,
``app.version``: no ``conversation.id``), which the metrics exporter sends; the logs carry
no compaction event, and the summariser's request is a ``codex.api_request`` like any
other. So a Codex compaction is not a boundary otel-progress can see: the loop that goes
on across it is caught exactly as without it. These tests keep that absence checked (a
later release that logs its compactions makes them fail) and the metric's shape.

Scenario ``loop``: the same ``cat`` six times, Codex compacting after the third (golden
file ``golden/codex-<version>-compaction-loop.jsonl``; ``OTEL_PROGRESS_UPDATE_GOLDEN=1``
rewrites it; the metrics export is ``….metrics.json``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .cli_capture import (
    GOLDEN,
    UPDATE_ENV,
    Receiver,
    cli_env,
    detect,
    golden_file,
    observations,
    read_records,
    run_cli,
    same_detections,
    slim,
    workspace,
    write_jsonl,
)
from .fake_openai_responses import FakeResponsesAPI, Step
from .test_codex_cli import VERSION, _binary, _config, http_exporter

#: ``model_auto_compact_token_limit`` for the tests, and the input tokens past it.
LIMIT = 4000
FULL = 5000
STEPS = [Step(command="cat notes.txt")] * 6 + [Step(message="The notes say the same thing.")]
CONTEXT = [1200, 1200, FULL] + [1200] * 4
GOLDEN_LOGS = GOLDEN / f"codex-{VERSION}-compaction-loop.jsonl"
GOLDEN_METRICS = GOLDEN / f"codex-{VERSION}-compaction-loop.metrics.json"


def capture(tmp: Path) -> tuple[Path, list[dict[str, Any]], FakeResponsesAPI]:
    """Run the scenario with the real CLI, logs and metrics over OTLP/HTTP JSON; the logs
    file, the metrics export requests and the fake API."""
    binary = _binary()
    work, home = workspace(tmp, "alpha\nbeta\n", home="codex-home")
    with Receiver() as receiver, FakeResponsesAPI(STEPS, context=CONTEXT) as api:
        metrics = f'{{ otlp-http = {{ endpoint = "{receiver.endpoint}/v1/metrics", protocol = "json" }} }}'
        config = _config(api, http_exporter(receiver.endpoint)) + f"metrics_exporter = {metrics}\n"
        config = config.replace('model_provider = "scripted"\n',
                                f'model_provider = "scripted"\nmodel_auto_compact_token_limit = {LIMIT}\n')
        (home / "config.toml").write_text(config)
        env = cli_env(tmp, CODEX_HOME=str(home), SCRIPTED_API_KEY="not-a-key", NO_COLOR="1")
        run_cli([str(binary), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                 "--json", "-C", str(work), "Read notes.txt and act on it."],
                env=env, timeout=180, stdin=subprocess.DEVNULL, expect='"turn.completed"')
        logs, metric_requests = list(receiver.requests["logs"]), list(receiver.requests["metrics"])
    path = tmp / GOLDEN_LOGS.name
    write_jsonl(path, logs)
    if os.environ.get(UPDATE_ENV) == "1":
        write_jsonl(GOLDEN_LOGS, slim(logs))
        GOLDEN_METRICS.write_text(json.dumps(compact_metric_only(metric_requests)) + "\n")
    return path, metric_requests, api


def compact_metric_only(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Metrics export requests for the golden file: only ``codex.task.compact`` (the other
    metrics are hundreds of KiB of timings no reader reads)."""
    out = []
    for request in requests:
        for rm in request.get("resourceMetrics", ()):
            kept = [{**sm, "metrics": [m for m in sm.get("metrics", ()) if m.get("name") == "codex.task.compact"]}
                    for sm in rm.get("scopeMetrics", ())]
            kept = [sm for sm in kept if sm["metrics"]]
            if kept:
                out.append({"resourceMetrics": [{**rm, "scopeMetrics": kept}]})
    return out


def compact_counts(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The data points of ``codex.task.compact`` in metrics export requests, as attribute maps."""
    out = []
    for request in requests:
        for rm in request.get("resourceMetrics", ()):
            for sm in rm.get("scopeMetrics", ()):
                for metric in sm.get("metrics", ()):
                    if metric.get("name") != "codex.task.compact":
                        continue
                    for point in (metric.get("sum") or {}).get("dataPoints", ()):
                        attributes = {a["key"]: next(iter(a["value"].values())) for a in point.get("attributes", ())}
                        out.append({**attributes, "value": int(point.get("asInt", 0))})
    return out


def check_logs(path: Path) -> None:
    names = {r.attributes.get("event.name") or r.event_name for r in read_records(path)}
    assert not any("compact" in name for name in names), names
    assert not any(o.kind == "compaction" for o in observations(path)), "no compaction record to read"
    tools = [o.call for o in observations(path) if o.kind == "tool" and o.call is not None]
    assert len(tools) == 6 and len({c.result for c in tools}) == 1
    # the boundary is invisible: the loop is caught exactly as in the capture without a compaction
    assert same_detections(detect(path), detect(golden_file(f"codex-{VERSION}-loop.jsonl")))


def test_real_cli_compacts_and_says_so_only_in_a_metric(tmp_path: Path) -> None:
    path, metrics, api = capture(tmp_path)
    assert len(api.compactions) == 1, "Codex asked for a handoff summary"
    check_logs(path)
    counts = compact_counts(metrics)
    assert counts and sum(c["value"] for c in counts) == 1
    assert all(c["type"] == "local" and c["manual"] == "false" and "conversation.id" not in c for c in counts)


def test_golden_capture_has_no_compaction_record() -> None:
    check_logs(golden_file(GOLDEN_LOGS.name))
    counts = compact_counts(json.loads(golden_file(GOLDEN_METRICS.name).read_text()))
    assert [(c["type"], c["manual"], c["value"]) for c in counts] == [("local", "false", 1)]
