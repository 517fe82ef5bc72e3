"""Detections as ``gen_ai.evaluation.result`` log records in span context, through the
real SDK's logs pipeline (``detection_events``): in-process with the SDK's in-memory and
OTLP/gRPC log exporters (the latter to a real gRPC LogsService), and zero-code under
``opentelemetry-instrument`` with the console exporter; on every supported SDK (CI runs
this file on 1.40 too)."""

from __future__ import annotations

import logging
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk._logs import LoggerProvider, LogRecordProcessor
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from otel_progress import Config, ConfigError, ProgressSpanProcessor
from otel_progress.instrument import ProgressInstrumentor
from otel_progress.model.evaluation import EVENT_NAME
from otel_progress.processor.log_events import logs_configured

from .conftest import ROOT, docs_loop, json_objects, make_rig, progress_events, run_script
from .test_zero_code import _declarative_supported

EXAMPLES_ZERO_CODE = ROOT / "examples" / "zero_code"

INSTRUMENT_ENV = {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none",
                  "OTEL_LOGS_EXPORTER": "console", "OTEL_SERVICE_NAME": "log-events-test"}


def _logs(resource: Resource | None = None) -> tuple[LoggerProvider, InMemoryLogRecordExporter]:
    provider = LoggerProvider(resource=resource or Resource({"service.name": "agent-app"}), shutdown_on_exit=False)
    exporter = InMemoryLogRecordExporter()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    return provider, exporter


def _records(exporter: InMemoryLogRecordExporter) -> list[Any]:
    return [r for r in exporter.get_finished_logs() if r.log_record.event_name == EVENT_NAME]


@pytest.mark.parametrize("analysis", ["inline", "background"])
def test_each_detection_is_one_record_parented_to_its_span(analysis: str) -> None:
    provider, exporter = _logs()
    r = make_rig(analysis=analysis, logger_provider=provider)
    docs_loop(r.agent(), turns=8)
    spans = r.by_id()  # (flushes the background worker)
    assert len(r.detections) == 2  # level 1 at turn 4, level 2 at turn 8
    records = _records(exporter)
    assert len(records) == len(r.detections)
    for det, rw in zip(r.detections, records, strict=True):
        record = rw.log_record
        assert format(record.trace_id, "032x") == det.trace_id
        assert format(record.span_id, "016x") == det.span_id
        span = spans[det.span_id]  # the tool span that carries the span event
        assert span.name == "execute_tool search_docs"
        assert [e["progress.turn"] for _, e in progress_events(span)] == [det.turn]
        assert int(record.trace_flags) == 1
        assert record.severity_number.value == 13 and record.severity_text == "WARN"
        assert record.timestamp and record.observed_timestamp
        attrs = dict(record.attributes)
        assert attrs == {
            "event.name": EVENT_NAME,
            "gen_ai.evaluation.name": "progress.no_progress",
            "gen_ai.evaluation.score.label": "barren",
            "gen_ai.evaluation.score.value": float(det.level),
            "gen_ai.evaluation.explanation": record.body,
            "progress.event": "no_progress",
            **det.event_attributes(),
            "gen_ai.agent.name": "docs-agent",
        }
        # (each of docs_loop's model calls reads 1,000 input tokens; none of its steps made progress)
        assert det.figures["wasted_input_tokens"] == 1000 * det.turn
        assert record.body == (f"docs-agent stopped making progress at turn {det.turn}: barren (barren steps 4,"
                               f" wasted input tokens {1000 * det.turn}) on search_docs; level {int(det.level)},"
                               f" {det.level.action}")
        assert "refund" not in str(attrs)  # never the arguments
        assert rw.instrumentation_scope.name == "otel_progress"
        assert rw.resource.attributes["service.name"] == "agent-app"  # the application's resource
    assert r.processor.log_events is not None and r.processor.log_events.emitted == 2


def test_span_mode_emits_no_record_and_log_mode_leaves_the_spans_alone() -> None:
    provider, exporter = _logs()
    span_rig = make_rig(analysis="inline", logger_provider=provider, detection_events="span")
    docs_loop(span_rig.agent(), turns=8)
    assert span_rig.processor.log_events is None
    assert any(progress_events(s) for s in span_rig.spans())
    assert _records(exporter) == []

    log_rig = make_rig(analysis="inline", logger_provider=provider, detection_events="log")
    docs_loop(log_rig.agent(), turns=8)
    assert len(log_rig.detections) == 2
    spans = log_rig.spans()
    assert not any(progress_events(s) or "progress.detected" in (s.attributes or {}) for s in spans)
    assert [format(rw.log_record.span_id, "016x") for rw in _records(exporter)] == [
        d.span_id for d in log_rig.detections]


def test_the_setting_comes_from_its_variable_and_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    provider, exporter = _logs()
    monkeypatch.setenv("OTEL_PROGRESS_DETECTION_EVENTS", "span")
    r = make_rig(analysis="inline", logger_provider=provider)
    docs_loop(r.agent(), turns=5)
    assert r.processor.log_events is None and _records(exporter) == []
    monkeypatch.setenv("OTEL_PROGRESS_DETECTION_EVENTS", "logs")
    with pytest.raises(ConfigError, match="OTEL_PROGRESS_DETECTION_EVENTS"):
        make_rig(logger_provider=provider)
    with pytest.raises(ConfigError, match="detection_events"):
        ProgressSpanProcessor(config=Config(), detection_events="spans")


def test_without_a_logger_provider_it_says_so_once_and_keeps_the_span_events(
        caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry._logs import get_logger_provider

    if logs_configured(get_logger_provider()):  # pragma: no cover - some test set a global provider
        pytest.skip("a global LoggerProvider is set in this process")
    with caplog.at_level(logging.WARNING, logger="otel_progress.processor"):
        both = make_rig(analysis="inline")
        docs_loop(both.agent(), turns=8)
        log_only = make_rig(analysis="inline", detection_events="log")  # warns now, and keeps span events
        docs_loop(log_only.agent(), turns=8)
    for r in (both, log_only):
        assert len(r.detections) == 2
        events = [(s.name, len(progress_events(s))) for s in r.spans() if progress_events(s)]
        assert sorted(events) == [("execute_tool search_docs", 1)] * 2 + [("invoke_agent docs-agent", 2)]
    messages = [m.getMessage() for m in caplog.records if "LoggerProvider" in m.getMessage()]
    assert len(messages) == 2, messages  # one per processor, not per detection
    assert "not emitted as log events" in messages[0] and "stay span events" in messages[1]


class _Exploding(LogRecordProcessor):
    def on_emit(self, log_record: Any) -> None:
        raise RuntimeError("log pipeline bug")

    emit = on_emit  # (the SDK's older name)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def test_a_failing_logs_pipeline_never_reaches_the_application(caplog: pytest.LogCaptureFixture) -> None:
    provider = LoggerProvider(shutdown_on_exit=False)
    provider.add_log_record_processor(_Exploding())
    with caplog.at_level(logging.WARNING, logger="otel_progress.processor"):
        r = make_rig(analysis="inline", logger_provider=provider)
        docs_loop(r.agent(), turns=8)  # raises nothing
    assert len(r.detections) == 2  # the hook still ran, after the failed emission
    assert r.processor.processor_errors == 2
    assert any(progress_events(s) for s in r.spans())
    assert sum("detection log event raised RuntimeError" in m.getMessage() for m in caplog.records) == 1


class _CountingProvider(LoggerProvider):
    def __init__(self) -> None:
        super().__init__(shutdown_on_exit=False)
        self.loggers = 0

    def get_logger(self, *args: Any, **kwargs: Any) -> Any:
        self.loggers += 1
        return super().get_logger(*args, **kwargs)


@pytest.mark.parametrize("analysis", ["inline", "background"])
def test_spans_without_detections_never_touch_the_logs_pipeline(analysis: str) -> None:
    provider = _CountingProvider()
    r = make_rig(analysis=analysis, logger_provider=provider)
    for _ in range(3):
        docs_loop(r.agent(), turns=8, healthy=True)
    r.spans()
    assert r.detections == [] and provider.loggers == 0
    docs_loop(r.agent(), turns=8)
    r.spans()
    assert provider.loggers == 1 and r.processor.log_events is not None and r.processor.log_events.emitted == 2


# -- the OTLP/gRPC log exporter, to a real LogsService ------------------------------------


class _LogsService:
    def __init__(self) -> None:
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

        self._pb = logs_service_pb2
        self.requests: list[Any] = []
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=[("grpc.so_reuseport", 0)])
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.logs.v1.LogsService", {"Export": grpc.unary_unary_rpc_method_handler(
                self._export, request_deserializer=logs_service_pb2.ExportLogsServiceRequest.FromString,
                response_serializer=logs_service_pb2.ExportLogsServiceResponse.SerializeToString)}),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _export(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.requests.append(request)
        return self._pb.ExportLogsServiceResponse()

    def records(self) -> list[tuple[Any, Any]]:
        with self.lock:
            return [(rl.resource, r) for req in self.requests for rl in req.resource_logs
                    for sl in rl.scope_logs for r in sl.log_records]


def test_the_records_reach_a_logs_service_through_the_otlp_exporter() -> None:
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    service = _LogsService()
    try:
        provider = LoggerProvider(resource=Resource({"service.name": "otlp-agent"}), shutdown_on_exit=False)
        provider.add_log_record_processor(BatchLogRecordProcessor(
            OTLPLogExporter(endpoint=f"127.0.0.1:{service.port}", insecure=True)))
        r = make_rig(logger_provider=provider, on_detection=None)  # auto: background analysis
        assert r.processor.analysis == "background"
        docs_loop(r.agent(), turns=8)
        r.processor.force_flush()
        assert provider.force_flush(10_000)
        records = service.records()
        provider.shutdown()
    finally:
        service.server.stop(0)
    assert len(records) == 2
    spans = r.by_id()
    flagged = sorted(sid for sid, s in spans.items() if progress_events(s) and s.name.startswith("execute_tool"))
    assert sorted(rec.span_id.hex() for _, rec in records) == flagged
    for resource, rec in records:
        assert rec.event_name == EVENT_NAME and rec.trace_id.hex() == format(spans[flagged[0]].context.trace_id, "032x")
        attrs = {kv.key: kv.value for kv in rec.attributes}
        assert attrs["gen_ai.evaluation.name"].string_value == "progress.no_progress"
        assert attrs["gen_ai.evaluation.score.value"].double_value in (1.0, 2.0)
        assert attrs["progress.turn"].int_value in (4, 8)
        assert {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"] == "otlp-agent"


# -- zero code ----------------------------------------------------------------------------


def _instrumented(env: dict[str, str]) -> Any:
    instrument = str(Path(sys.executable).parent / "opentelemetry-instrument")
    proc = run_script([instrument, sys.executable, "looping_agent.py"], {**INSTRUMENT_ENV, **env},
                      cwd=EXAMPLES_ZERO_CODE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _console_records(text: str) -> list[dict[str, Any]]:
    return [o for o in json_objects(text) if isinstance(o, dict) and o.get("event_name") == EVENT_NAME]


@pytest.mark.parametrize("analysis", ["inline", "background"])
def test_zero_code_emits_the_records_through_the_configured_logs_pipeline(analysis: str) -> None:
    proc = _instrumented({"OTEL_PROGRESS_ANALYSIS": analysis})
    records = _console_records(proc.stdout)
    assert [(r["attributes"]["progress.turn"], r["attributes"]["gen_ai.evaluation.score.value"])
            for r in records] == [(4, 1.0), (8, 2.0)]
    spans = {o["context"]["span_id"]: o for o in json_objects(proc.stdout) if isinstance(o, dict) and "context" in o}
    for r in records:
        span = spans[r["span_id"]]
        assert span["name"] == "execute_tool search_docs"
        assert span["context"]["trace_id"] == r["trace_id"]
        assert [e["attributes"]["progress.turn"] for e in span["events"] if e["name"] == "no_progress"] == [
            r["attributes"]["progress.turn"]]
        assert r["resource"]["attributes"]["service.name"] == "log-events-test"
    assert "otel-progress" not in proc.stderr


def test_zero_code_log_mode_and_a_bad_value() -> None:
    proc = _instrumented({"OTEL_PROGRESS_DETECTION_EVENTS": "log"})
    assert len(_console_records(proc.stdout)) == 2
    spans = [o for o in json_objects(proc.stdout) if isinstance(o, dict) and "context" in o]
    assert spans and not any(e["name"] == "no_progress" for s in spans for e in s.get("events", []))
    bad = _instrumented({"OTEL_PROGRESS_DETECTION_EVENTS": "every"})
    assert "otel-progress: not enabled" in bad.stderr and "OTEL_PROGRESS_DETECTION_EVENTS" in bad.stderr


def test_instrument_option(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.delenv("OTEL_PROGRESS_DETECTION_EVENTS", raising=False)
    provider, exporter = _logs()
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    instrumentor = ProgressInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, logger_provider=provider, detection_events="log",
                            analysis="inline")
    try:
        processor = instrumentor.processor
        assert processor is not None and processor.log_events is not None
        assert processor.log_events.provider is provider
        from otel_progress.demo import ScriptedAgent

        docs_loop(ScriptedAgent(tracer_provider.get_tracer("t")), turns=5)
        assert len(_records(exporter)) == 1
    finally:
        instrumentor.uninstrument()


@pytest.mark.skipif(not _declarative_supported(), reason="SDK without OTEL_CONFIG_FILE support"
                    " or opentelemetry-configuration not installed")
def test_declarative_file_with_a_logger_provider_and_the_option(tmp_path: Any) -> None:
    text = (EXAMPLES_ZERO_CODE / "otel-config.yaml").read_text().replace(
        "instrumentation/development:",
        "logger_provider:\n  processors:\n    - simple:\n        exporter:\n          console: {}\n"
        "instrumentation/development:").replace(
        "      barren_threshold: 5\n", "      barren_threshold: 5\n      detection_events: log\n")
    (tmp_path / "otel-config.yaml").write_text(text)
    (tmp_path / "manifest.json").write_text((EXAMPLES_ZERO_CODE / "manifest.json").read_text())
    instrument = str(Path(sys.executable).parent / "opentelemetry-instrument")
    proc = run_script([instrument, sys.executable, str(EXAMPLES_ZERO_CODE / "looping_agent.py")],
                      {"OTEL_CONFIG_FILE": str(tmp_path / "otel-config.yaml")}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _console_records(proc.stdout)
    assert [r["attributes"]["progress.turn"] for r in records] == [5]  # barren_threshold 5, from the file
    spans = [o for o in json_objects(proc.stdout) if isinstance(o, dict) and "context" in o]
    assert spans and not any(e["name"] == "no_progress" for s in spans for e in s.get("events", []))
