"""`serve` says when a set-up cannot form runs (issue 27, item 5): tool spans that are each
the root of a trace of their own and name no conversation (a bare MCP client exporting
through a Collector) are never grouped, so the service warns once per service, naming what
to add, and counts them in ``progress.service.setup.ungrouped_spans``. The same calls under
an ``invoke_agent`` span, naming ``gen_ai.conversation.id``, a single such call, or a few
spread over services, are no set-up problem. Real gRPC on loopback, real /metrics."""

from __future__ import annotations

import json
import logging

import pytest

from .helpers import agent_span, http_get, prom_value, request, span, tool_span

PROM = "progress_service_setup_ungrouped_spans_total"


def _root_call(trace: int, turn: int, conversation: str | None = None):
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
             "gen_ai.tool.call.arguments": {"q": "same"}, "gen_ai.tool.call.result": json.dumps({"items": []})}
    if conversation:
        attrs["gen_ai.conversation.id"] = conversation
    return span(trace, 1, None, "execute_tool search", turn * 2.0, turn * 2.0 + 0.5, attrs)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name.startswith("otel_progress") and "name no conversation" in r.getMessage()]


def _counted(svc, service: str | None = None) -> float:
    text = http_get(f"http://127.0.0.1:{svc.health_port}/metrics")[1]
    return prom_value(text, PROM, {"service_name": service} if service else None)


def test_a_bare_client_is_warned_about_once_and_counted(make_service, downstream, client_for, caplog) -> None:
    svc = make_service(forward_endpoint=downstream.endpoint)
    client = client_for(svc)
    with caplog.at_level(logging.WARNING, logger="otel_progress"):
        requests = [request([_root_call(10 + t, t)], service="mcp-client") for t in range(1, 5)]
        for req in requests:
            client.export(req)
        client.export(requests[-1])  # a Collector retry: not counted again
        client.export(request([_root_call(20, 5), _root_call(21, 6)], service="mcp-client"))
    assert _counted(svc, "mcp-client") == 6
    (record,) = _warnings(caplog)
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert "'mcp-client'" in text and "gen_ai.conversation.id" in text and "invoke_agent" in text, text
    assert PROM in text and "Traceback" not in caplog.text
    assert len(downstream.received) == 6  # every request forwarded, as always


@pytest.mark.parametrize("how", ["agent", "conversation", "single", "per_service"])
def test_a_set_up_that_forms_runs_is_not_warned_about(make_service, downstream, client_for, caplog, how) -> None:
    svc = make_service(forward_endpoint=downstream.endpoint)
    client = client_for(svc)
    with caplog.at_level(logging.WARNING, logger="otel_progress"):
        if how == "agent":
            spans = [tool_span(1, 200 + t, 1, t) for t in range(1, 6)] + [agent_span(1, 1, None, 5)]
            client.export(request(spans, service="mcp-client"))
        elif how == "conversation":
            for t in range(1, 6):
                client.export(request([_root_call(10 + t, t, "support-1")], service="mcp-client"))
        elif how == "single":
            client.export(request([_root_call(10, 1)], service="mcp-client"))
        else:  # two calls each from two services: neither sent three
            for t in range(1, 5):
                client.export(request([_root_call(10 + t, t)], service=f"client-{t % 2}"))
    assert _counted(svc) == 0
    assert not _warnings(caplog)
