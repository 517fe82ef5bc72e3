"""``ProgressSpanProcessor``: the engine inside the OpenTelemetry Python SDK.

Feeds ending tool-call spans to a :class:`~otel_progress.engine.ProgressEngine` and puts
what it detects into the exported data: on the tool span where the detection fired (in
place in ``_on_ending`` where the SDK allows it, else on an annotated copy handed to the
wrapped exporting processor) and on the run's still-open ``invoke_agent`` span (through
the public span API). See docs/processor.md.

The package, one module per responsibility:

* :mod:`.span_processor`: :class:`ProgressSpanProcessor`, the SDK's ``SpanProcessor``
  interface: it wires the parts below and installs the route of its analysis mode;
* :mod:`.modes`: the analysis modes (``inline``, ``background``, ``auto``) and the
  process hooks (fork, interpreter exit);
* :mod:`.forwarding`: the calls forwarded to the wrapped processors;
* :mod:`.analysis`: span bookkeeping, each start and end fed to the run tracker
  (:mod:`otel_progress.runs.live`);
* :mod:`.sdk`: what this SDK allows (the probe) and how a span's fields are read, with a
  public-API fallback for every private field;
* :mod:`.handoff`: background analysis (queue, worker, drain, fork safety);
* :mod:`.annotation`: which spans get which detections, live annotation and annotated
  copies;
* :mod:`.outlets`: each detection to the metrics (:mod:`.metrics`), the log records and
  the ``on_detection`` hook;
* :mod:`.errors`: error containment (count, rate-limited log);
* :mod:`.content`: the run-time warning for tool spans without content;
* :mod:`.log_events`: the detections as ``gen_ai.evaluation.result`` log records, through
  the SDK's logs pipeline (the ``detection_events`` setting).
"""

from __future__ import annotations

from .log_events import DETECTION_EVENTS, ENV_DETECTION_EVENTS, DetectionLogger, detection_events_mode
from .modes import ANALYSIS_MODES, ENV_ANALYSIS, analysis_mode
from .outlets import DetectionHook
from .sdk import on_ending_is_mutable
from .span_processor import ProgressSpanProcessor

__all__ = ["ANALYSIS_MODES", "DETECTION_EVENTS", "ENV_ANALYSIS", "ENV_DETECTION_EVENTS", "DetectionHook",
           "DetectionLogger", "ProgressSpanProcessor", "analysis_mode", "detection_events_mode",
           "on_ending_is_mutable"]
