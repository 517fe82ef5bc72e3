"""Names shared by the doctor and the watcher inside the watched run."""

from __future__ import annotations

__all__ = ["ENV_CHAINED_HOOK", "ENV_REPORT", "HOOK"]

#: Where the watcher writes its report (set by the doctor).
ENV_REPORT = "OTEL_PROGRESS_DOCTOR_REPORT"
#: The user's own ``OTEL_PROGRESS_ON_DETECTION``, called after the watcher's.
ENV_CHAINED_HOOK = "OTEL_PROGRESS_DOCTOR_CHAINED_HOOK"
#: The hook specification the doctor sets.
HOOK = "otel_progress.doctor.watch:on_detection"
