"""The engine's state codec (otel_progress/engine/snapshot.py): state written and read
back continues exactly as the state it was, and bytes that are not such state (corrupt,
foreign, not the package's) are refused with a clear error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.quality.corpus import load_corpus
from bench.quality.otlp import build_trace
from otel_progress import Config, ProgressEngine
from otel_progress.engine.snapshot import CorruptState, ForeignState, StateCodec
from otel_progress.model import ToolCall
from otel_progress.otlp.files import spans_from_request
from otel_progress.scan.analyse import analyse_trace

ROOT = Path(__file__).resolve().parents[2]


class _RoundTrip(ProgressEngine):
    """An engine whose every trace is written and read back (through the codec) after
    every other tool call: any state the codec loses changes the detections."""

    _calls = 0

    def observe(self, call, **kwargs):  # type: ignore[no-untyped-def]
        out = super().observe(call, **kwargs)
        self._calls += 1
        if self._calls % 2 == 0:
            codec = self.state_codec()
            for trace_id in list(self._table.traces):
                self.adopt_trace(codec.loads(codec.dumps(self.trace_state(trace_id))))
        return out


def _key(d):  # type: ignore[no-untyped-def]
    return (d.span_id, d.reason.value, int(d.level), d.scope.value, d.turn, d.run_id)


def test_state_written_and_read_back_continues_as_it_was_on_the_whole_corpus():
    runs = sorted(load_corpus(), key=lambda r: r.id)
    assert len(runs) > 50
    differ = []
    for run in runs:
        config = Config.from_mapping(run.config, source=run.id) if run.config else Config()
        spans = list(spans_from_request(build_trace(run, "genai").document))
        plain = [_key(d) for d in analyse_trace(spans, ProgressEngine(config)).detections]
        report = analyse_trace(spans, _RoundTrip(config))
        assert not report.skipped, (run.id, report.skipped[:2])  # (a state the codec refused)
        carried = [_key(d) for d in report.detections]
        if plain != carried:
            differ.append((run.id, plain, carried))
    assert not differ, differ[:3]


def _call(n: int) -> ToolCall:
    return ToolCall(trace_id="t1", run_id="r1", span_id=f"s{n}", name="search", arguments='{"q": "x"}',
                    result='{"items": []}', start_ns=n * 10, end_ns=n * 10 + 5)


def test_corrupt_foreign_and_unknown_bytes_are_refused():
    engine = ProgressEngine()
    for n in range(3):
        engine.observe(_call(n), flush=True)
    codec = engine.state_codec()
    data = codec.dumps(engine.trace_state("t1"))
    assert codec.loads(data).runs["r1"].turn == engine.trace_state("t1").runs["r1"].turn
    with pytest.raises(CorruptState, match="magic"):
        codec.loads(b"garbage")
    with pytest.raises(CorruptState, match="authentication"):
        codec.loads(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CorruptState):
        codec.loads(data[:40])
    keyed = ProgressEngine(Config(digest_key="another")).state_codec()
    with pytest.raises(ForeignState, match="key"):
        keyed.loads(data)
    # a payload naming a callable outside the package's classes is never loaded
    evil = StateCodec(engine.config, {})
    with pytest.raises(CorruptState, match=r"(os|posix)\.system"):
        codec.loads(evil.dumps(os.system))


def test_state_of_another_hash_seed_is_foreign():
    engine = ProgressEngine()
    engine.observe(_call(1), flush=True)
    data = engine.state_codec().dumps(engine.trace_state("t1"))
    probe = ("import sys; from otel_progress import ProgressEngine\n"
             "from otel_progress.engine.snapshot import ForeignState\n"
             "try:\n    ProgressEngine().state_codec().loads(sys.stdin.buffer.read())\n"
             "except ForeignState as e:\n    print('foreign', e)\n")
    done = subprocess.run([sys.executable, "-c", probe], input=data, capture_output=True, cwd=ROOT, check=False,
                          env={"PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"})
    assert done.stdout.decode().startswith("foreign"), done.stderr.decode()
    assert "probe" in done.stdout.decode()
