"""The doctor's check export (issue 28, item 6): an exporter that cannot send is an error,
not "every check passed". Against a closed port, and against a real OTLP/gRPC receiver
(``otel-progress serve``, forwarding to a recording gRPC server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_progress import Config
from otel_progress.service.options import ServiceConfig
from otel_progress.service.server import ProgressService
from tests.service.helpers import Downstream, free_port

from .conftest import BIN, clean_env, doctor
from .test_doctor import AGENT, CONTENT

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]


def _otlp_env(port: int) -> dict[str, str]:
    # PYTHONPATH: this checkout's otel_progress, also where another one is installed
    return clean_env(**CONTENT, OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
                     PYTHONPATH=str(ROOT))


def test_an_exporter_that_cannot_send_is_an_error() -> None:
    port = free_port()  # nothing listens there
    proc = doctor("--format", "json", env=_otlp_env(port))
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["exit_status"] == 1
    assert report["export"]["ok"] is False and report["export"]["endpoint"] == f"http://127.0.0.1:{port}"
    (finding,) = [f for f in report["findings"] if f["topic"] == "export"]
    assert finding["severity"] == "error"
    assert f"127.0.0.1:{port}" in finding["message"] and "UNAVAILABLE" in finding["message"]
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in finding["fix"]
    text = doctor(env=_otlp_env(port))
    assert text.returncode == 1 and "every check passed" not in text.stdout
    assert "Span export: FAILED" in text.stdout and "could not send to" in text.stdout


def test_an_exporter_that_sends_passes() -> None:
    downstream = Downstream().start()
    service = ProgressService(ServiceConfig(listen="127.0.0.1:0", health_listen="127.0.0.1:0",
                                            forward_endpoint=f"127.0.0.1:{downstream.port}", drain_timeout=2.0),
                              Config()).start()
    try:
        proc = doctor("--format", "json", env=_otlp_env(service.port))
        report = json.loads(proc.stdout)
        assert proc.returncode == 0, report["findings"]
        assert report["findings"] == [] and report["export"]["ok"] is True
        assert report["export"]["exporter"] == "otlp_proto_grpc"
    finally:
        service.stop(grace=0.5)
        downstream.stop()


def test_a_watched_run_whose_exporter_cannot_send_is_an_error() -> None:
    """The run exports elsewhere than the environment checked (here its own variable; an
    endpoint set in code is the same case): the exporter's own failures in the run count."""
    downstream = Downstream().start()
    service = ProgressService(ServiceConfig(listen="127.0.0.1:0", health_listen="127.0.0.1:0",
                                            forward_endpoint=f"127.0.0.1:{downstream.port}", drain_timeout=2.0),
                              Config()).start()
    closed = free_port()
    try:
        proc = doctor("--format", "json", "--timeout", "120", "--", "env",
                      f"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:{closed}", str(BIN / "python"), str(AGENT),
                      env=_otlp_env(service.port))
        report = json.loads(proc.stdout)
    finally:
        service.stop(grace=0.5)
        downstream.stop()
    assert report["export"]["ok"] is True  # the environment's endpoint listens
    assert report["returncode"] == 0 and report["run"]["tool_spans"] == 5
    assert report["run"]["export_failures"] >= 1
    (finding,) = [f for f in report["findings"] if f["topic"] == "export"]
    assert finding["severity"] == "error" and f"127.0.0.1:{closed}" in finding["message"]
    assert proc.returncode == 1
    # the run's own output is unchanged: the exporter's line is still there
    assert f"Failed to export traces to 127.0.0.1:{closed}" in proc.stderr
