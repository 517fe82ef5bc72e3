"""``ProgressSpanProcessor``: the engine inside the OpenTelemetry Python SDK.

Feeds ending tool-call spans to a :class:`~otel_progress.engine.ProgressEngine` and puts
what it detects into the exported data: on the tool span where the detection fired (in
place in ``_on_ending`` where the SDK allows it, else on an annotated copy handed to the
wrapped exporting processor) and on the run's still-open ``invoke_agent`` span (through
the public span API). See docs/processor.md.

The package, one module per responsibility:

* :mod:`.span_processor`: :class:`ProgressSpanProcessor`, the SDK's ``SpanProcessor``
  interface (forwarding to the wrapped processors, analysis modes, delivery of the
  detections to spans, metrics and the hook, error containment);
* :mod:`.sdk`: what this SDK allows (the probe) and how a span's fields are read, with a
  public-API fallback for every private field;
* :mod:`.tracker`: runs and lineage (which run a span belongs to) and the engine calls;
* :mod:`.handoff`: background analysis (queue, worker, drain, fork safety);
* :mod:`.annotation`: live annotation and annotated copies;
* :mod:`.log_events`: the detections as ``gen_ai.evaluation.result`` log records, through
  the SDK's logs pipeline (the ``detection_events`` setting).
"""

from __future__ import annotations

from .log_events import DETECTION_EVENTS, ENV_DETECTION_EVENTS, DetectionLogger, detection_events_mode
from .sdk import on_ending_is_mutable
from .span_processor import ANALYSIS_MODES, ENV_ANALYSIS, DetectionHook, ProgressSpanProcessor, analysis_mode

__all__ = ["ANALYSIS_MODES", "DETECTION_EVENTS", "ENV_ANALYSIS", "ENV_DETECTION_EVENTS", "DetectionHook",
           "DetectionLogger", "ProgressSpanProcessor", "analysis_mode", "detection_events_mode",
           "on_ending_is_mutable"]
