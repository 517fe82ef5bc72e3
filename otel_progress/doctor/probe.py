"""The environment probe of ``otel-progress doctor``: run as ``python -m
otel_progress.doctor.probe`` in the interpreter being examined, it prints one JSON object
(after the line :data:`MARKER`) describing what ``opentelemetry-instrument`` would do there.

It walks the ``opentelemetry_instrumentor`` entry points in the order
``opentelemetry-instrument`` does (``opentelemetry.instrumentation.auto_instrumentation._load``)
and applies the same rules: a name in ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` is skipped,
an instrumentor whose ``instruments`` requirement is not met is skipped silently, a
``ModuleNotFoundError`` or ``ImportError`` skips it, and any other exception at
``instrument()`` stops the loading of every instrumentor after it. Each instrumentor is
really loaded and instrumented here (in this throw-away process, with no SDK configured),
except otel-progress's own ``progress``, which needs the SDK and is only imported.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import traceback
from typing import Any

__all__ = ["MARKER", "probe"]

#: The line after which the probe's JSON starts (instrumentors may print before it).
MARKER = "--- otel-progress doctor probe ---"

_GROUP = "opentelemetry_instrumentor"
_PROGRESS = "progress"


def _short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 500 else text[:497] + "..."


def _where(exc: BaseException) -> str:
    """The innermost frame of the exception (file:line), for the report."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f"{last.filename}:{last.lineno}"


def _distributions() -> dict[str, str]:
    from importlib.metadata import distributions

    out: dict[str, str] = {}
    for dist in distributions():
        name = (dist.metadata.get("Name") or "").strip()
        if name:
            out.setdefault(name.lower().replace("_", "-"), dist.version)
    return out


_GENAI_UTIL = "opentelemetry-util-genai"


def _genai_util_users() -> list[str]:
    """Installed distributions that require ``opentelemetry-util-genai`` (not as an extra):
    the instrumentations whose content setting is ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``."""
    import re
    from importlib.metadata import distributions

    out: set[str] = set()
    for dist in distributions():
        for requirement in dist.requires or ():
            name, _, marker = requirement.partition(";")
            base = re.split(r"[\s<>=!~\[(]", name.strip(), maxsplit=1)[0].lower().replace("_", "-")
            if base == _GENAI_UTIL and "extra" not in marker:
                out.add((dist.metadata.get("Name") or "").strip().lower().replace("_", "-"))
    return sorted(n for n in out if n)


def _entry_points(group: str) -> list[Any]:
    try:
        from opentelemetry.util._importlib_metadata import entry_points
    except Exception:  # opentelemetry-api missing: fall back to the standard library
        from importlib.metadata import entry_points
    return list(entry_points(group=group))


def _dist_of(ep: Any) -> Any:
    dist = getattr(ep, "dist", None)
    if dist is not None:
        return dist
    from importlib.metadata import distributions

    for d in distributions():
        for other in d.entry_points:
            if (other.group, other.name, other.value) == (ep.group, ep.name, ep.value):
                return d
    return None


def _instrumentors(environ: dict[str, str]) -> list[dict[str, Any]]:
    disabled_raw = environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    disabled = {x.strip() for x in disabled_raw.split(",") if x.strip()}
    try:
        from opentelemetry.instrumentation.dependencies import get_dist_dependency_conflicts
    except Exception:
        get_dist_dependency_conflicts = None  # type: ignore[assignment]
    out: list[dict[str, Any]] = []
    stopped_by: str | None = None
    for ep in _entry_points(_GROUP):
        dist = _dist_of(ep)
        row: dict[str, Any] = {
            "name": ep.name,
            "target": ep.value,
            "distribution": (dist.metadata.get("Name") if dist is not None else None),
            "version": (dist.version if dist is not None else None),
            "status": "loads",
            "detail": "",
        }
        out.append(row)
        if stopped_by is not None:
            row.update(status="not_reached", detail=f"'{stopped_by}' raised before it: opentelemetry-instrument"
                       " stops loading instrumentors there")
            continue
        if "*" in disabled or ep.name in disabled:
            row.update(status="disabled", detail="listed in OTEL_PYTHON_DISABLED_INSTRUMENTATIONS")
            continue
        try:
            conflict = get_dist_dependency_conflicts(dist) if (get_dist_dependency_conflicts and dist) else None
        except Exception as exc:
            conflict = None
            row["detail"] = f"dependency check failed: {_short_error(exc)}"
        if conflict:
            row.update(status="skipped", detail=f"skipped silently: {conflict}")
            continue
        try:
            instrumentor = ep.load()
            if ep.name == _PROGRESS:
                row["detail"] = "imports; installs the progress processor once the SDK is configured"
                continue
            instrumentor().instrument(skip_dep_check=True)
        except ModuleNotFoundError as exc:
            row.update(status="skipped", detail=f"skipped: {exc.msg}")
        except ImportError as exc:
            row.update(status="import_error", detail=f"skipped with an error: {_short_error(exc)}")
        except Exception as exc:
            row.update(status="raises", detail=f"raises at instrument(): {_short_error(exc)}", where=_where(exc))
            stopped_by = ep.name
    return out


def _component_names(group: str) -> list[str]:
    return sorted({ep.name for ep in _entry_points(group)})


def _progress_settings(environ: dict[str, str]) -> dict[str, Any]:
    settings = {k: v for k, v in sorted(environ.items()) if k.startswith("OTEL_PROGRESS_")}
    error = None
    try:
        from otel_progress.processor.settings import build_config

        build_config({}, environ)
        from otel_progress.processor import analysis_mode

        analysis_mode()
    except Exception as exc:
        error = str(exc) or type(exc).__name__
    return {"settings": settings, "error": error}


def _export(environ: dict[str, str]) -> dict[str, Any] | None:
    """The check export to the configured endpoint (:mod:`otel_progress.doctor.export`);
    run before the instrumentors are loaded here, which could instrument its client."""
    try:
        from otel_progress.doctor.export import export_check

        return export_check(environ)
    except Exception as exc:  # never let the check stop the probe
        return {"exporter": "?", "endpoint": "?", "ok": False, "error": _short_error(exc)}


def probe(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """What this interpreter's environment would do under ``opentelemetry-instrument``."""
    env = dict(os.environ if environ is None else environ)
    bindir = os.path.dirname(sys.executable)
    instrument = os.path.join(bindir, "opentelemetry-instrument")
    data: dict[str, Any] = {
        "python": sys.executable,
        "python_version": sys.version.split()[0],
        "opentelemetry_instrument": (instrument if os.path.exists(instrument)
                                     else shutil.which("opentelemetry-instrument")),
        "distributions": _distributions(),
        "genai_util_users": _genai_util_users(),
        "distros": _component_names("opentelemetry_distro"),
        "configurators": _component_names("opentelemetry_configurator"),
        "exporters": {signal: _component_names(f"opentelemetry_{signal}_exporter")
                      for signal in ("traces", "metrics", "logs")},
        "environment": {k: v for k, v in sorted(env.items()) if k.startswith(("OTEL_", "OPENINFERENCE_",
                                                                                  "TRACELOOP_", "ADK_"))},
    }
    data["progress"] = _progress_settings(env)
    data["export"] = _export(env)
    data["instrumentors"] = _instrumentors(env)
    return data


def main() -> int:
    try:
        data = probe()
    except Exception as exc:  # never a traceback: the doctor reports it
        data = {"error": _short_error(exc)}
    sys.stdout.write("\n" + MARKER + "\n" + json.dumps(data) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
