"""Where ``otel-progress scan``'s time goes, stage by stage, in one process (run by
``bench/bench_scan.py`` in a fresh interpreter per tree, so a tree of another commit is
measured with the same script).

Run: ``PYTHONPATH=<tree> python bench/scan_stages.py FILE [REPEAT]`` prints one JSON object:
CPU seconds of cumulative stages over the whole file, each a fresh reading of it, the least
of ``REPEAT`` (default 3) readings for every stage but the last (noise on a shared machine
only adds time):

* ``parse``: the lines read and parsed (``iter_documents``);
* ``records``: and every document's spans read into records (``spans_from_request``, lean);
* ``assembly``: and the records assembled into complete traces (``TraceAssembler``);
* ``null``: the whole scan (reading, assembling, each trace replayed through the run model,
  the conventions reading each call) with an engine that finds nothing at no cost;
* ``full``: the whole scan with the engine (``detections``: how many it reported).

Only the interfaces every tree since the layered move has are used (``_Scan`` is the
scan's driver; it takes the engine it drives).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def _null_engine() -> Any:
    """An engine that finds nothing at no cost: the scan's work without the engine's."""
    from otel_progress import Config, ProgressEngine

    class NullEngine(ProgressEngine):
        def observe(self, call: Any, flush: bool = False) -> list[Any]:
            return []

        def flush(self, *args: Any, **kwargs: Any) -> list[Any]:
            return []

        def record_tokens(self, *args: Any, **kwargs: Any) -> None:
            return None

        def compaction(self, *args: Any, **kwargs: Any) -> list[Any]:
            return []

        def end_run(self, *args: Any, **kwargs: Any) -> None:
            return None

        def end_trace(self, *args: Any, **kwargs: Any) -> list[Any]:
            return []

    return NullEngine(Config())


def main(path: str, repeat: int = 3) -> dict[str, float]:
    from otel_progress import Config, ProgressEngine
    from otel_progress.otlp.files import ReadProblem, iter_documents, open_input, spans_from_request
    from otel_progress.runs.assembly import TraceAssembler
    from otel_progress.scan import MAX_DOCUMENT_BYTES, MAX_HELD_SPANS, ScanResult, _Progress, _Scan

    def documents() -> Any:
        stream, _ = open_input(path)
        with stream:
            for item in iter_documents(stream, path):
                if not isinstance(item, ReadProblem):
                    yield item

    def parse() -> None:
        for _ in documents():
            pass

    def records() -> None:
        for _, doc in documents():
            for _ in spans_from_request(doc, [], lean=True):
                pass

    def assembly() -> None:
        assembler = TraceAssembler(max_held_spans=MAX_HELD_SPANS)
        for line, doc in documents():
            for span in spans_from_request(doc, [], lean=True):
                assembler.add(span, path, line)
            assembler.end_document()
        for _ in assembler.finish():
            pass

    def scan(engine: Any) -> int:
        result = ScanResult()
        driver = _Scan(engine, result, _Progress(0, sys.stderr, False), MAX_DOCUMENT_BYTES, MAX_HELD_SPANS)
        driver.read(path)
        driver.finish()
        return len(result.detections)

    out: dict[str, float] = {}
    for name, stage in (("parse", parse), ("records", records), ("assembly", assembly),
                        ("null", lambda: scan(_null_engine())), ("full", lambda: scan(ProgressEngine(Config())))):
        times = []
        for _ in range(1 if name == "full" else repeat):
            t0 = time.process_time()
            found = stage()
            times.append(time.process_time() - t0)
        out[name] = min(times)
        if name == "full":
            out["detections"] = float(found or 0)
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)))
