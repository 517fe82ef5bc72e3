"""The content-settings table: what each instrumentation's switches mean."""

from __future__ import annotations

import pytest

from otel_progress.conventions.content_settings import SETTINGS, Capture, advice_for_span, evaluate, setting_for_span

GENAI = SETTINGS[-1].instrumentation


def _status(name: str, env: dict[str, str]):
    (status,) = [s for s in evaluate(env) if s.instrumentation == name]
    return status


@pytest.mark.parametrize(("env", "capture"), [
    ({}, Capture.NO),
    ({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}, Capture.NO),
    ({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "EVENT_ONLY",
      "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}, Capture.NO),
    ({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"}, Capture.DEPENDS),
    ({"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
      "OTEL_SEMCONV_STABILITY_OPT_IN": "http, gen_ai_latest_experimental"}, Capture.YES),
])
def test_util_genai_modes(env: dict[str, str], capture: Capture) -> None:
    status = _status(GENAI, env)
    assert status.capture is capture, status
    assert bool(status.fix) == (capture is not Capture.YES)


def test_true_is_not_a_mode_and_the_fix_names_both_settings() -> None:
    status = _status(GENAI, {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    assert "not a mode" in status.detail
    assert "SPAN_ONLY" in status.fix and "gen_ai_latest_experimental" in status.fix


def test_adk_true_means_event_only_and_legacy_is_on_by_default() -> None:
    adk = "Google ADK (native)"
    assert _status(adk, {}).capture is Capture.NO
    assert _status(adk, {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}).capture is Capture.NO
    assert _status(adk, {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"}).capture is Capture.YES
    assert _status(adk, {"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1"}).capture is Capture.YES
    assert _status(adk, {"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1",
                         "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "false"}).capture is Capture.NO


def test_strands_events_by_default_attributes_with_the_opt_in_and_redaction() -> None:
    strands = "Strands Agents (native)"
    assert _status(strands, {}).capture is Capture.EVENTS
    assert _status(strands, {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}).capture is Capture.YES
    redacted = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental,gen_ai_unredacted_attributes="}
    assert _status(strands, redacted).capture is Capture.NO


def test_openinference_and_openllmetry_switches() -> None:
    assert _status("OpenInference", {}).capture is Capture.YES
    assert _status("OpenInference", {"OPENINFERENCE_HIDE_OUTPUTS": "TRUE"}).capture is Capture.NO
    assert _status("OpenInference", {"OPENINFERENCE_HIDE_OUTPUTS": "yes"}).capture is Capture.YES  # not a bool there
    assert _status("OpenLLMetry (Traceloop)", {}).capture is Capture.YES
    assert _status("OpenLLMetry (Traceloop)", {"TRACELOOP_TRACE_CONTENT": "false"}).capture is Capture.NO


def test_evaluate_filters_by_installed_distributions() -> None:
    names = [s.instrumentation for s in evaluate({}, {"openinference-instrumentation-agno": "1.0", "agno": "3"})]
    assert names == ["OpenInference"]
    assert [s.instrumentation for s in evaluate({}, {"google_adk": "2"})] == ["Google ADK (native)"]


def test_a_span_is_matched_to_the_instrumentation_that_wrote_it() -> None:
    assert setting_for_span({"openinference.span.kind": "TOOL"}).instrumentation == "OpenInference"
    assert setting_for_span({"gen_ai.operation.name": "execute_tool"}, "strands.telemetry.tracer").instrumentation \
        == "Strands Agents (native)"
    assert setting_for_span({"gen_ai.operation.name": "execute_tool"}).instrumentation == GENAI
    assert setting_for_span({"http.method": "GET"}) is None
    advice = advice_for_span({"gen_ai.operation.name": "execute_tool"},
                             {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"})
    assert "SPAN_ONLY" in advice and "set " in advice


def test_a_library_without_content_settings_is_not_an_environment_problem() -> None:
    # strands-agents depends on mcp: its presence alone says nothing about the agent's spans
    from otel_progress.doctor.checks import environment_findings

    probe = {"opentelemetry_instrument": "/venv/bin/opentelemetry-instrument", "configurators": ["configurator"],
             "exporters": {"traces": ["console"], "metrics": [], "logs": []},
             "environment": {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none",
                             "OTEL_LOGS_EXPORTER": "none"},
             "distributions": {"mcp": "1.20.0", "strands-agents": "1.62.0"},
             "instrumentors": [{"name": "progress", "status": "loads"}], "progress": {"settings": {}, "error": None}}
    assert environment_findings(probe) == []
    probe["environment"]["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental,gen_ai_unredacted_attributes="
    (finding,) = environment_findings(probe)
    assert finding.topic == "content" and "Strands" in finding.message
