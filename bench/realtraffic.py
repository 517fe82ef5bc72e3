"""Agent traffic for the benchmarks: the real runs of ``../shared/realtraces`` (else the
synthetic scoreboard corpus) as OTLP/JSON documents, as protobuf spans, and as streams of
``ExportTraceServiceRequest`` bytes such as a Collector sends; coding agents' log
captures (tests/coding_agents/golden) as ``ExportLogsServiceRequest`` bytes.

Nothing of the runs' content is written anywhere: everything is built in memory.

A request stream interleaves ``in_flight`` runs (spans in the order they ended, picked at
random among the runs in flight, as an SDK's batch processor and a Collector deliver them)
in requests of ``spans_per_request`` spans, each span under its run's resource. Every
replay of a run gets a new trace id (and, for logs, new session ids), so that nothing is
answered from a retry cache and the engine sees new runs.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REAL_DIR = REPO.parent / "shared" / "realtraces"
GOLDEN = REPO / "tests" / "coding_agents" / "golden"

__all__ = ["REAL_DIR", "RunSpans", "log_requests", "mixed_runs", "proto_runs", "real_calls", "real_tool_spans",
           "request_stream", "trace_documents", "traffic_source"]


def real_files(swebench: bool = False) -> list[Path]:
    """The real runs' trace files that exist here (not the ``.steps`` files); ``swebench``:
    also those of ``swebench/`` (45 MB of coding-agent runs)."""
    if not REAL_DIR.is_dir():
        return []
    files = [REAL_DIR / "dev.jsonl.gz", *sorted((REAL_DIR / "added").glob("*.jsonl.gz"))]
    if swebench:
        files += sorted((REAL_DIR / "swebench").glob("*.jsonl.gz"))
    return [f for f in files if f.is_file() and ".steps." not in f.name]


def traffic_source(swebench: bool = False) -> str:
    """What the traffic is made of, for the benchmarks' headers."""
    files = real_files(swebench)
    if files:
        return "real runs: " + ", ".join(str(f.relative_to(REAL_DIR)) for f in files)
    return "synthetic: the scoreboard corpus (bench/quality/corpus), GenAI convention"


def trace_documents(swebench: bool = False) -> list[dict[str, Any]]:
    """One OTLP/JSON ``ExportTraceServiceRequest`` per run (``swebench``: see :func:`real_files`)."""
    files = real_files(swebench)
    docs: list[dict[str, Any]] = []
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            docs.extend(json.loads(line) for line in fh if line.strip())
    if docs:
        return docs
    from bench.quality.corpus import load_corpus
    from bench.quality.otlp import build_trace

    return [build_trace(run, "genai").document for run in load_corpus()]


def _b64_ids(node: Any) -> Any:
    """OTLP/JSON (hex ids) -> protobuf's JSON mapping (base64 ids)."""
    if isinstance(node, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId", "parentSpanId")
                    and isinstance(v, str) and v else _b64_ids(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_b64_ids(v) for v in node]
    return node


class RunSpans:
    """One run as protobuf: its resource's bytes and its spans' bytes in end order (each
    span serialized with its trace id first, as every OTLP encoder writes it)."""

    __slots__ = ("is_tool", "resource", "scope", "spans")

    def __init__(self, resource: bytes, scope: bytes, spans: list[bytes], is_tool: list[bool]):
        self.resource = resource
        self.scope = scope
        self.spans = spans
        self.is_tool = is_tool

    @property
    def tool_spans(self) -> int:
        return sum(self.is_tool)


def proto_runs(docs: list[dict[str, Any]] | None = None) -> list[RunSpans]:
    """The runs of :func:`trace_documents` as :class:`RunSpans`."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    out: list[RunSpans] = []
    for doc in docs if docs is not None else trace_documents():
        request = json_format.ParseDict(_b64_ids(doc), ExportTraceServiceRequest(), ignore_unknown_fields=True)
        for rs in request.resource_spans:
            spans = [s for ss in rs.scope_spans for s in ss.spans]
            if not spans:
                continue
            spans.sort(key=lambda s: s.end_time_unix_nano)
            tools = [any(kv.key == "gen_ai.operation.name" and kv.value.string_value == "execute_tool"
                         for kv in s.attributes) for s in spans]
            scope = rs.scope_spans[0].scope.SerializeToString()
            out.append(RunSpans(rs.resource.SerializeToString(), scope, [s.SerializeToString() for s in spans],
                                tools))
    return out


def _plain_trace(rnd: random.Random, n: int) -> list[bytes]:
    """A web service's trace of ``n`` plain spans (eight HTTP attributes each)."""
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    def kv(key: str, value: Any) -> common_pb2.KeyValue:
        if isinstance(value, int):
            return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(int_value=value))
        return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=str(value)))

    t0 = 1_764_000_000_000_000_000
    root = rnd.getrandbits(64).to_bytes(8, "big")
    out = []
    for i in range(n):
        span_id = root if i == n - 1 else rnd.getrandbits(64).to_bytes(8, "big")
        span = trace_pb2.Span(trace_id=b"\x00" * 16, span_id=span_id, name="GET /api/v1/items",
                              parent_span_id=b"" if i == n - 1 else root, kind=trace_pb2.Span.SPAN_KIND_CLIENT,
                              start_time_unix_nano=t0 + i * 1000, end_time_unix_nano=t0 + i * 1000 + 500)
        span.attributes.extend([kv("http.request.method", "GET"), kv("url.full", f"https://svc.invalid/{i}"),
                                kv("http.response.status_code", 200), kv("server.address", "svc.invalid"),
                                kv("server.port", 443), kv("network.protocol.version", "1.1"),
                                kv("user_agent.original", "bench/1.0"), kv("http.route", "/api/v1/items")])
        out.append(span.SerializeToString())
    return out


def mixed_runs(runs: list[RunSpans], tool_share: float = 0.10, seed: int = 5) -> list[RunSpans]:
    """The agent runs and, in traces of their own, as many plain spans (an instrumented web
    service beside the agents) as make ``tool_share`` of all spans tool calls."""
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.resource.v1 import resource_pb2

    rnd = random.Random(seed)
    tools = sum(r.tool_spans for r in runs)
    total = sum(len(r.spans) for r in runs)
    plain_needed = max(0, int(tools / tool_share) - total)
    resource = resource_pb2.Resource(attributes=[common_pb2.KeyValue(
        key="service.name", value=common_pb2.AnyValue(string_value="web"))]).SerializeToString()
    scope = common_pb2.InstrumentationScope(name="opentelemetry.instrumentation.requests").SerializeToString()
    out = list(runs)
    while plain_needed > 0:
        n = min(plain_needed, 50)
        out.append(RunSpans(resource, scope, _plain_trace(rnd, n), [False] * n))
        plain_needed -= n
    rnd.shuffle(out)
    return out


# -- protobuf encoding of requests (by hand: spans stay the bytes they are) ---------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _with_trace_id(span: bytes, trace_id: bytes) -> bytes:
    if span[:2] != b"\x0a\x10":
        raise ValueError("span bytes do not start with the trace id")
    return span[:2] + trace_id + span[18:]


def request_stream(runs: list[RunSpans], spans_per_request: int = 512, in_flight: int = 16,
                   seed: int = 7) -> Iterator[tuple[bytes, int, int]]:
    """Endless ``(request bytes, spans, tool spans)``: the runs replayed over and over,
    ``in_flight`` at a time, each replay under a new trace id."""
    rnd = random.Random(seed)
    replay = 0
    order = list(range(len(runs)))
    rnd.shuffle(order)
    cursor = 0
    flying: list[list[Any]] = []  # [run, trace id, next span index]

    def admit() -> None:
        nonlocal cursor, replay
        while len(flying) < in_flight:
            run = runs[order[cursor % len(order)]]
            cursor += 1
            replay += 1
            trace_id = (0xB0 << 120 | replay << 32 | rnd.getrandbits(32)).to_bytes(16, "big")
            flying.append([run, trace_id, 0])

    while True:
        admit()
        by_run: dict[int, tuple[RunSpans, list[bytes]]] = {}
        spans = tools = 0
        while spans < spans_per_request:
            k = rnd.randrange(len(flying))
            entry = flying[k]
            run, trace_id, i = entry
            group = by_run.setdefault(id(entry), (run, []))[1]
            group.append(_with_trace_id(run.spans[i], trace_id))
            spans += 1
            tools += run.is_tool[i]
            entry[2] = i + 1
            if entry[2] >= len(run.spans):
                flying.pop(k)
                admit()
        body = b"".join(
            _field(1, _field(1, run.resource) + _field(2, _field(1, run.scope) + b"".join(_field(2, s) for s in group)))
            for run, group in by_run.values())
        yield body, spans, tools


# -- tool calls and logs ---------------------------------------------------------------


def real_calls() -> list[Any]:
    """The tool calls of the runs as the engine gets them (``ToolCall``), in run order."""
    from opentelemetry.proto.trace.v1 import trace_pb2

    from otel_progress.conventions.spans import SpanKind, classify, read_tool_call
    from otel_progress.service.otlp import span_record

    calls = []
    for run in proto_runs():
        for raw in run.spans:
            record = span_record(trace_pb2.Span.FromString(raw))
            if classify(record) is SpanKind.TOOL:
                calls.append(read_tool_call(record))
    return calls


def real_tool_spans() -> list[tuple[str, dict[str, Any], bool]]:
    """The tool spans of the runs as an instrumentation makes them: ``(span name,
    attributes, failed)``, in run order."""
    from opentelemetry.proto.trace.v1 import trace_pb2

    from otel_progress.service.otlp import span_record

    out = []
    for run in proto_runs():
        for raw, tool in zip(run.spans, run.is_tool, strict=True):
            if tool:
                record = span_record(trace_pb2.Span.FromString(raw))
                attrs = {k: v for k, v in record.attributes.items() if isinstance(v, (str, bool, int, float))}
                out.append((record.name, attrs, record.error))
    return out


_ID_KEYS = ("session.id", "conversation.id", "prompt.id", "prompt_id", "conversation_id", "user.id")


def log_captures() -> list[list[dict[str, Any]]]:
    """The coding agents' golden log captures: per capture, its export requests (OTLP/JSON)."""
    out = []
    for path in sorted(GOLDEN.glob("*.jsonl")):
        if path.name.endswith(".traces.jsonl"):
            continue
        docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        docs = [d for d in docs if "resourceLogs" in d]
        if docs:
            out.append(docs)
    return out


def _capture_ids(docs: list[dict[str, Any]]) -> list[str]:
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("key") in _ID_KEYS and isinstance(node.get("value"), dict):
                value = node["value"].get("stringValue")
                if isinstance(value, str) and len(value) >= 8:
                    found.add(value)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(docs)
    return sorted(found, key=lambda v: (-len(v), v))


def log_requests(count: int, seed: int = 3) -> tuple[list[bytes], int]:
    """``count`` ``ExportLogsServiceRequest`` bytes: the captures' requests, each capture
    replayed under fresh session and conversation ids (same lengths), captures
    interleaved; and the records in them."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    rnd = random.Random(seed)
    templates = []
    for docs in log_captures():
        ids = _capture_ids(docs)
        raws = []
        for d in docs:
            message = json_format.ParseDict(_b64_ids(d), ExportLogsServiceRequest(), ignore_unknown_fields=True)
            records = sum(len(sl.log_records) for rl in message.resource_logs for sl in rl.scope_logs)
            raws.append((message.SerializeToString(), records))
        pattern = re.compile(b"|".join(re.escape(i.encode()) for i in ids)) if ids else None
        templates.append((raws, ids, pattern))
    out: list[bytes] = []
    records = 0
    replay = 0
    cursors: list[tuple[int, int, dict[bytes, bytes]]] = []  # (template, next request, id map)
    while len(out) < count:
        while len(cursors) < 8:
            t = rnd.randrange(len(templates))
            replay += 1
            mapping = {i.encode(): _fresh(i, replay, rnd).encode() for i in templates[t][1]}
            cursors.append((t, 0, mapping))
        k = rnd.randrange(len(cursors))
        t, i, mapping = cursors[k]
        raws, _ids, pattern = templates[t]
        raw, n = raws[i]
        if pattern is not None:
            raw = pattern.sub(lambda m, ids=mapping: ids[m.group(0)], raw)
        out.append(raw)
        records += n
        if i + 1 < len(raws):
            cursors[k] = (t, i + 1, mapping)
        else:
            cursors.pop(k)
    return out, records


def _fresh(value: str, replay: int, rnd: random.Random) -> str:
    """A new id of the same length and alphabet shape (hex digits for alphanumerics)."""
    digits = f"{replay:x}{rnd.getrandbits(64):x}"
    out = []
    k = 0
    for ch in value:
        if ch.isalnum():
            out.append(digits[k % len(digits)])
            k += 1
        else:
            out.append(ch)
    return "".join(out)
