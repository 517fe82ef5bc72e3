"""Run state that outlives a ``serve`` process (docs/service.md, "Deployments and
guarantees"): real ``otel-progress serve`` processes over real gRPC, a real Redis server.

* ``--state-dir``: SIGTERM then a restart continues a looping run to park, no level
  announced twice, the agent span carrying every detection of the run; the same after a
  SIGKILL from the periodic checkpoint; a corrupt or foreign checkpoint is a warning and
  an empty start (exit status 0).
* ``--state-store``: two replicas sharing Redis, a run's first half on A and the rest on
  B: B continues at the next level and B's agent span carries the run's detections; a run
  moving back and forth; a corrupt entry or an unreachable store is a warning, detection
  goes on; the store's password is never printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from otel_progress.service.state import CHECKPOINT_NAME

from ..redis_server import redis_server
from .helpers import (
    Client,
    Downstream,
    Request,
    barren_chat_turn,
    detections_on,
    env_without_serve_vars,
    free_port,
    http_get,
    loop_trace,
    request,
    wait_until,
)

REPO = Path(__file__).resolve().parents[2]
AGENT_SPAN = "0000000000000001"  # (loop_trace's invoke_agent span)

pytestmark = pytest.mark.timeout(180)


class Serve:
    """One ``otel-progress serve`` process."""

    def __init__(self, forward: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.port, self.health = free_port(), free_port()
        full = env_without_serve_vars()
        full.pop("PYTHONHASHSEED", None)  # (serve pins its own: what is tested)
        full.update(env or {})
        full["PYTHONPATH"] = str(REPO) + os.pathsep + full.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "otel_progress.cli", "serve", "--listen", f"127.0.0.1:{self.port}",
             "--health-listen", f"127.0.0.1:{self.health}", "--forward-endpoint", forward,
             "--drain-timeout", "3", *args],
            env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        ready = wait_until(lambda: self.proc.poll() is not None
                          or http_get(f"http://127.0.0.1:{self.health}/readyz")[0] == 200, 30, 0.1)
        if not ready or self.proc.poll() is not None:
            self.stop(signal.SIGKILL)
            pytest.fail(f"serve did not become ready: {self.err}")
        self.client = Client(f"127.0.0.1:{self.port}")
        self.err = ""

    def send(self, spans: Sequence) -> None:
        self.client.export(request(spans))

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if getattr(self, "client", None) is not None:
            self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            _out, self.err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _out, self.err = self.proc.communicate(timeout=10)
        return int(self.proc.returncode)


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    ds = Downstream().start()
    yield ds
    ds.stop()


def _detections(ds: Downstream, start: int = 0) -> list[tuple[str, str, int]]:
    """``(span, reason, level)`` of the detection events received since ``start``."""
    out = []
    for raw in ds.received[start:]:
        for span, _event, attrs in detections_on(Request.FromString(raw)):
            out.append((span, str(attrs["progress.reason"]), int(attrs["progress.level"])))
    return out


def _halves(trace: int, turns: int = 16, first: int = 4) -> tuple[list, list]:
    """A looping run: its first ``first`` turns (chat and tool spans), then the rest and
    its agent span."""
    spans = loop_trace(trace, turns=turns)
    calls, agent = spans[:-1], spans[-1]
    return calls[:2 * first], [*calls[2 * first:], agent]


def _check_continued(before: list[tuple[str, str, int]], after: list[tuple[str, str, int]]) -> None:
    """The run was nudged once per level across the two processes, parked, and the agent
    span (in the second) carries every detection of the run."""
    on_calls = [(r, lv) for s, r, lv in before + after if s != AGENT_SPAN]
    assert sorted(lv for _r, lv in on_calls) == [1, 2, 3], (before, after)  # each level once: no re-announce
    assert {lv for s, _r, lv in before if s != AGENT_SPAN}, before  # (the first process announced)
    assert {lv for s, _r, lv in after if s != AGENT_SPAN}, after  # (the second continued, at the next level)
    assert max(lv for s, _r, lv in before) < min(lv for s, _r, lv in after if s != AGENT_SPAN)
    assert sorted((r, lv) for s, r, lv in after if s == AGENT_SPAN) == sorted(on_calls)


def test_sigterm_writes_a_checkpoint_and_a_restart_continues_the_run_to_park(downstream, tmp_path):
    first, rest = _halves(501)
    a = Serve(downstream.endpoint, "--state-dir", str(tmp_path))
    a.send(first)
    assert a.stop() == 0, a.err
    assert (tmp_path / CHECKPOINT_NAME).stat().st_size > 100
    before = _detections(downstream)
    mark = len(downstream.received)
    b = Serve(downstream.endpoint, "--state-dir", str(tmp_path))
    b.send(rest)
    assert b.stop() == 0, b.err
    assert "restored 1 open traces" in b.err, b.err
    _check_continued(before, _detections(downstream, mark))


def test_without_state_a_restart_starts_the_run_over(downstream):
    """What the state prevents (the failure of issue 27): level 1 announced twice, and the
    agent span carries only the second process's detections."""
    first, rest = _halves(502)
    a = Serve(downstream.endpoint)
    a.send(first)
    assert a.stop() == 0
    before, mark = _detections(downstream), len(downstream.received)
    b = Serve(downstream.endpoint)
    b.send(rest)
    assert b.stop() == 0
    after = _detections(downstream, mark)
    assert [lv for s, _r, lv in before + after if s != AGENT_SPAN].count(1) == 2


def test_sigkill_restart_continues_from_the_periodic_checkpoint(downstream, tmp_path):
    first, rest = _halves(503)
    a = Serve(downstream.endpoint, "--state-dir", str(tmp_path), "--checkpoint-interval", "0.5")
    path = tmp_path / CHECKPOINT_NAME
    a.send(first)
    sent = time.time()
    assert wait_until(lambda: path.exists() and path.stat().st_mtime > sent + 0.1, 10)
    a.stop(signal.SIGKILL)
    before, mark = _detections(downstream), len(downstream.received)
    b = Serve(downstream.endpoint, "--state-dir", str(tmp_path))
    b.send(rest)
    assert b.stop() == 0, b.err
    _check_continued(before, _detections(downstream, mark))


def test_checkpoint_is_bounded_by_checkpoint_max_mib(downstream, tmp_path):
    a = Serve(downstream.endpoint, "--state-dir", str(tmp_path), "--checkpoint-max-mib", "1")
    for n in range(40):
        a.send(loop_trace(600 + n, turns=40, args={"q": "x" * 2000 + str(n)})[:-1])
    assert a.stop() == 0, a.err
    assert (tmp_path / CHECKPOINT_NAME).stat().st_size <= 1024 * 1024 + 4096


@pytest.mark.parametrize("what", ["corrupt", "cut", "foreign_key", "not_state"])
def test_a_corrupt_or_foreign_checkpoint_is_a_warning_and_an_empty_start(downstream, tmp_path, what):
    path = tmp_path / CHECKPOINT_NAME
    if what == "corrupt":
        path.write_bytes(b"\x00not a checkpoint" * 100)
    else:
        first, _rest = _halves(504)
        env = {"OTEL_PROGRESS_DIGEST_KEY": "the other replica set"} if what == "foreign_key" else None
        a = Serve(downstream.endpoint, "--state-dir", str(tmp_path), env=env)
        a.send(first)
        assert a.stop() == 0, a.err
        data = path.read_bytes()
        if what == "cut":
            path.write_bytes(data[: len(data) // 2])
        elif what == "not_state":
            path.write_bytes(data[:-8] + b"tampered")
    b = Serve(downstream.endpoint, "--state-dir", str(tmp_path))
    mark = len(downstream.received)
    b.send(loop_trace(505, turns=8))  # (it serves, from an empty state)
    assert b.stop() == 0, b.err
    assert "Traceback" not in b.err, b.err
    assert "is ignored" in b.err and "starting empty" in b.err, b.err
    assert "restored" not in b.err
    assert 1 in [lv for _s, _r, lv in _detections(downstream, mark)]


def test_two_replicas_sharing_redis_hand_a_run_over_at_the_next_level(downstream):
    first, rest = _halves(506)
    with redis_server() as url:
        a = Serve(downstream.endpoint, "--state-store", url)
        b = Serve(downstream.endpoint, "--state-store", url)
        try:
            a.send(first)
            before, mark = _detections(downstream), len(downstream.received)
            b.send(rest)
            after = _detections(downstream, mark)
        finally:
            assert a.stop() == 0, a.err
            assert b.stop() == 0, b.err
    _check_continued(before, after)
    assert "Traceback" not in a.err + b.err


def test_a_run_moving_back_and_forth_between_replicas_is_continued_each_time(downstream):
    spans = loop_trace(507, turns=16)
    calls, agent = spans[:-1], spans[-1]
    with redis_server() as url:
        a = Serve(downstream.endpoint, "--state-store", url)
        b = Serve(downstream.endpoint, "--state-store", url)
        try:
            for n, replica in enumerate([a, b, a, b]):  # (a ring change, and back)
                replica.send(calls[8 * n:8 * n + 8])
            a.send([agent])
        finally:
            assert a.stop() == 0, a.err
            assert b.stop() == 0, b.err
    found = _detections(downstream)
    assert sorted(lv for s, _r, lv in found if s != AGENT_SPAN) == [1, 2, 3], found
    assert sorted(lv for s, _r, lv in found if s == AGENT_SPAN) == [1, 2, 3], found


def test_an_unreachable_store_is_a_warning_and_detection_goes_on(downstream):
    a = Serve(downstream.endpoint, "--state-store", f"redis://127.0.0.1:{free_port()}/0")
    a.send(loop_trace(508, turns=8))
    assert a.stop() == 0, a.err
    assert "cannot be reached" in a.err and "Traceback" not in a.err, a.err
    assert 1 in [lv for _s, _r, lv in _detections(downstream)]


def test_a_state_store_url_that_is_not_redis_is_refused_with_exit_2():
    proc = subprocess.run([sys.executable, "-m", "otel_progress.cli", "serve", "--state-store", "http://x:1"],
                          env={**env_without_serve_vars(), "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, cwd=REPO, timeout=60, check=False)
    assert proc.returncode == 2
    assert "state_store: expected redis://" in proc.stderr and "Traceback" not in proc.stderr


def test_a_corrupt_store_entry_is_a_warning_and_that_run_starts_afresh(downstream):
    import redis

    first, rest = _halves(509)
    with redis_server() as url:
        a = Serve(downstream.endpoint, "--state-store", url)
        b = Serve(downstream.endpoint, "--state-store", url)
        try:
            a.send(first)
            client = redis.Redis.from_url(url)
            keys = client.keys("otel-progress:s:*")
            assert len(keys) == 1, keys
            client.set(keys[0], b"OTPS\x00\x02{}" + b"\x00" * 64)  # (a newer generation, bytes that are no state)
            client.incr(keys[0].replace(b":s:", b":g:"))
            client.close()
            mark = len(downstream.received)
            b.send(rest)
            after = _detections(downstream, mark)
        finally:
            assert a.stop() == 0, a.err
            assert b.stop() == 0, b.err
    assert "is ignored" in b.err and "Traceback" not in b.err, b.err
    assert 1 in [lv for s, _r, lv in after if s != AGENT_SPAN]  # (B started that run over)


def test_options_and_the_pinned_hash_seed():
    from otel_progress.service.options import ServiceConfigError, from_args
    from otel_progress.service.run import DEFAULT_HASH_SEED, hash_seed

    cfg = from_args(environ={"OTEL_PROGRESS_SERVE_STATE_DIR": "/tmp/x",
                             "OTEL_PROGRESS_SERVE_CHECKPOINT_INTERVAL": "2.5",
                             "OTEL_PROGRESS_SERVE_CHECKPOINT_MAX_MIB": "8",
                             "OTEL_PROGRESS_SERVE_STATE_STORE": "redis://h:6379/1"})
    assert (cfg.state_dir, cfg.checkpoint_interval, cfg.checkpoint_max_mib, cfg.state_store) == (
        "/tmp/x", 2.5, 8, "redis://h:6379/1")
    for bad in ({"checkpoint_interval": 0}, {"checkpoint_max_mib": 0}, {"state_store": "h:6379"}):
        with pytest.raises(ServiceConfigError):
            from_args(environ={}, **bad)
    assert hash_seed({}) == DEFAULT_HASH_SEED
    keyed = hash_seed({"OTEL_PROGRESS_DIGEST_KEY": "k"})
    assert keyed == hash_seed({"OTEL_PROGRESS_DIGEST_KEY": "k"}) != hash_seed({"OTEL_PROGRESS_DIGEST_KEY": "j"})
    assert 1 <= keyed <= 4294967295


def test_the_store_password_is_never_printed():
    from otel_progress.service.describe import redact_url

    assert redact_url("redis://:s3cret@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url("redis://user:s3cret@h:6379/0") == "redis://user:***@h:6379/0"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    a = Serve.__new__(Serve)  # (only its stop: an unreachable store with a password)
    port, health = free_port(), free_port()
    env = {**env_without_serve_vars(), "PYTHONPATH": str(REPO)}
    a.proc = subprocess.Popen([sys.executable, "-m", "otel_progress.cli", "serve", "--listen", f"127.0.0.1:{port}",
                               "--health-listen", f"127.0.0.1:{health}", "--state-store",
                               f"redis://:s3cret@127.0.0.1:{free_port()}/0"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    assert wait_until(lambda: "cannot be reached" in http_get(f"http://127.0.0.1:{health}/healthz")[1]
                      or http_get(f"http://127.0.0.1:{health}/healthz")[0] == 200, 30, 0.2)
    a.stop()
    assert "s3cret" not in a.err and ":***@" in a.err, a.err


@pytest.mark.parametrize("turns", [9, 10])
def test_a_batch_retried_past_a_hand_off_is_analysed_in_order_by_the_replica_that_continues(downstream, turns):
    """The sender retried a batch of the run's (its replica restarted) and sent the later
    ones to the replica that continues the run meanwhile: the retried batch arrives late
    there, its calls folded into the continued run. The run still parks, each level once,
    and the agent span carries the run's detections."""
    spans = loop_trace(508, turns=turns)
    calls, agent = spans[:-1], spans[-1]
    with redis_server() as url:
        a = Serve(downstream.endpoint, "--state-store", url)
        b = Serve(downstream.endpoint, "--state-store", url)
        try:
            a.send(calls[:4])
            b.send(calls[8:])  # (the later batches, sent to the replica that continues)
            b.send(calls[4:8])  # (the batch retried after the restart: late)
            b.send([agent])
        finally:
            assert a.stop() == 0, a.err
            assert b.stop() == 0, b.err
    found = _detections(downstream)
    on_calls = sorted(lv for s, _r, lv in found if s != AGENT_SPAN)
    assert on_calls == [1, 2, 3], found
    assert sorted(lv for s, _r, lv in found if s == AGENT_SPAN) == [1, 2, 3], found


def _conversation_levels(ds: Downstream, start: int = 0) -> list[int]:
    return sorted(lv for span, reason, lv in _detections(ds, start) if span == AGENT_SPAN
                  and reason == "signature_repeat")


@pytest.mark.parametrize("state", [True, False])
def test_a_conversation_followed_across_traces_is_continued_after_a_restart(downstream, tmp_path, state):
    """A chat agent doing the same lookups with the same answers turn after turn (one trace
    per turn): two turns before a rolling restart, two after. With ``--state-dir`` the
    conversation's turns are in the checkpoint, so the 4th turn (the 3rd barren one) is the
    detection, as without the restart; without it the restarted replica starts the
    conversation over and says nothing."""
    args = ("--state-dir", str(tmp_path)) if state else ()
    a = Serve(downstream.endpoint, *args)
    for trace in (601, 602):
        a.send(barren_chat_turn(trace, "chat-1"))
    assert a.stop() == 0, a.err
    b = Serve(downstream.endpoint, *args)
    for trace in (603, 604):
        b.send(barren_chat_turn(trace, "chat-1"))
    assert b.stop() == 0, b.err
    if state:
        assert "and 1 conversations" in b.err or "and 2 conversations" in b.err, b.err
        assert _conversation_levels(downstream) == [1]
    else:
        assert _conversation_levels(downstream) == []
