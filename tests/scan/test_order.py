"""``scan`` does not depend on the order of the documents in its input: the project's
corpus (bench/quality/corpus: 76 runs, as OpenTelemetry GenAI traces), its spans split
into documents at random, the documents shuffled (as a shard written by several Collector
replicas, files merged from several exporters, an export sorted by another key), gives
the same detections as the corpus read one whole trace per line."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.quality.corpus import load_corpus
from bench.quality.otlp import build_trace
from otel_progress import Config
from otel_progress.scan import scan_paths

_TRACES: list[dict[str, Any]] = []


def _traces() -> list[dict[str, Any]]:
    if not _TRACES:
        _TRACES.extend(build_trace(run, "genai").document for run in load_corpus())
    return _TRACES


def _export(resource: dict[str, Any], scope: dict[str, Any], spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resource": resource, "scopeSpans": [{"scope": scope, "spans": spans}]}


def _detections(path: Path) -> list[dict[str, Any]]:
    return [d.to_dict() for d in scan_paths([str(path)], Config()).detections]


def _reference(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "whole.jsonl"
    path.write_text("".join(json.dumps(doc) + "\n" for doc in _traces()))
    return _detections(path)


def _shuffled(seed: int, max_chunk: int, per_document: int) -> str:
    """Every trace's spans cut into chunks of 1..max_chunk spans, the chunks shuffled and
    packed ``per_document`` to a document (one ResourceSpans per chunk, as a Collector's
    batch appends them)."""
    rnd = random.Random(seed)
    chunks = []
    for doc in _traces():
        rs = doc["resourceSpans"][0]
        scope = rs["scopeSpans"][0]
        spans = list(scope["spans"])
        rnd.shuffle(spans)
        while spans:
            n = rnd.randint(1, max_chunk)
            chunks.append(_export(rs["resource"], scope["scope"], spans[:n]))
            spans = spans[n:]
    rnd.shuffle(chunks)
    lines = []
    for i in range(0, len(chunks), per_document):
        lines.append(json.dumps({"resourceSpans": chunks[i:i + per_document]}))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    found = _reference(tmp_path_factory.mktemp("order"))
    assert len(found) > 38  # the corpus's loops are found (several levels each)
    return found


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), max_chunk=st.sampled_from([1, 3, 8, 40]), per_document=st.integers(1, 6))
def test_shuffled_and_split_documents_give_the_same_detections(tmp_path: Path, reference: list[dict[str, Any]],
                                                               seed: int, max_chunk: int, per_document: int) -> None:
    path = tmp_path / f"shuffled-{seed}-{max_chunk}-{per_document}.jsonl"
    path.write_text(_shuffled(seed, max_chunk, per_document))
    assert _detections(path) == reference


def test_reversed_documents_give_the_same_detections(tmp_path: Path, reference: list[dict[str, Any]]) -> None:
    """The extreme case: every span a document of its own, latest end first."""
    spans = [(rs["resource"], rs["scopeSpans"][0]["scope"], s) for doc in _traces() for rs in doc["resourceSpans"]
             for s in rs["scopeSpans"][0]["spans"]]
    spans.sort(key=lambda t: -int(t[2]["endTimeUnixNano"]))
    path = tmp_path / "reversed.jsonl"
    path.write_text("".join(json.dumps({"resourceSpans": [_export(r, sc, [s])]}) + "\n" for r, sc, s in spans))
    assert _detections(path) == reference
