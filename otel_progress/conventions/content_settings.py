"""Which setting puts a tool call's content (arguments and result) on its span, for each
instrumentation otel-progress reads.

Without content on the tool spans, identical calls cannot be told from new ones and most
signals stay silent (see docs/conventions.md). Every instrumentation has its own switch, several
default to *off*, and some accept values that look right and mean *off*
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` in
``opentelemetry-util-genai``). This module is the one table of those switches, read from
each instrumentation's own source, shared by ``otel-progress doctor`` (which reports the
settings in effect) and by the processor's run-time warning when tool spans keep arriving
without content (which names the setting to change: :func:`advice_for_span`).

Add an instrumentation by adding one :class:`ContentSetting` to :data:`SETTINGS`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "SETTINGS",
    "Capture",
    "ContentSetting",
    "ContentStatus",
    "advice_for_span",
    "evaluate",
    "setting_for_span",
]


class Capture(enum.Enum):
    """Whether the settings in effect put tool content on the spans."""

    YES = "yes"          # arguments and results are span attributes
    NO = "no"            # nothing, or content only in log records otel-progress never sees
    EVENTS = "events"    # only in span events (read by the conventions that support it)
    DEPENDS = "depends"  # depends on code or on the instrumentation's version (see the detail)


@dataclass(frozen=True, slots=True)
class ContentStatus:
    """What one instrumentation's content settings mean in an environment."""

    instrumentation: str
    capture: Capture
    detail: str
    fix: str = ""  # what to set for content on the spans ("" when nothing is needed)


@dataclass(frozen=True, slots=True)
class ContentSetting:
    """One instrumentation's content switch.

    ``distributions`` are the installed distributions (exact names, or prefixes ending in
    ``-``) it applies to; ``variables`` the environment variables it reads; ``judge`` turns
    an environment into a :class:`ContentStatus`; ``source`` says where the rule was read.
    """

    instrumentation: str
    distributions: tuple[str, ...]
    variables: tuple[str, ...]
    judge: Callable[[Mapping[str, str]], ContentStatus]
    source: str

    def applies_to(self, distribution: str) -> bool:
        name = distribution.lower().replace("_", "-")
        return any(name.startswith(d) if d.endswith("-") else name == d for d in self.distributions)


_GENAI_CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_SEMCONV = "OTEL_SEMCONV_STABILITY_OPT_IN"
_LATEST = "gen_ai_latest_experimental"
_GENAI_FIX = f"{_GENAI_CAPTURE}=SPAN_ONLY and {_SEMCONV}={_LATEST}"


def _get(env: Mapping[str, str], key: str) -> str:
    return (env.get(key) or "").strip()


def _opt_ins(env: Mapping[str, str]) -> set[str]:
    return {v.strip() for v in _get(env, _SEMCONV).split(",") if v.strip()}


def _util_genai(env: Mapping[str, str]) -> ContentStatus:
    name = "OpenTelemetry GenAI (opentelemetry-util-genai and the contrib instrumentations on it)"
    raw = _get(env, _GENAI_CAPTURE)
    mode = raw.upper()
    latest = _LATEST in _opt_ins(env)
    if mode in ("SPAN_ONLY", "SPAN_AND_EVENT"):
        if latest:
            return ContentStatus(name, Capture.YES, f"{_GENAI_CAPTURE}={raw}: arguments and results on the spans")
        return ContentStatus(name, Capture.DEPENDS,
                             f"{_GENAI_CAPTURE}={raw} but {_SEMCONV} lacks {_LATEST}: instrumentations that"
                             " still emit the older conventions put content in log events, not on spans",
                             fix=f"{_SEMCONV}={_LATEST}")
    if mode == "EVENT_ONLY":
        return ContentStatus(name, Capture.NO, f"{_GENAI_CAPTURE}=EVENT_ONLY: content goes to log records only",
                             fix=_GENAI_FIX)
    if not raw or mode == "NO_CONTENT":
        return ContentStatus(name, Capture.NO, f"{_GENAI_CAPTURE} {'unset' if not raw else '=NO_CONTENT'}:"
                             " no content (the default)", fix=_GENAI_FIX)
    return ContentStatus(name, Capture.NO, f"{_GENAI_CAPTURE}={raw} is not a mode (NO_CONTENT, SPAN_ONLY,"
                         " EVENT_ONLY, SPAN_AND_EVENT): it means no content", fix=_GENAI_FIX)


def _openinference(env: Mapping[str, str]) -> ContentStatus:
    name = "OpenInference"
    hidden = [k for k in ("OPENINFERENCE_HIDE_INPUTS", "OPENINFERENCE_HIDE_OUTPUTS") if _get(env, k).lower() == "true"]
    if hidden:
        return ContentStatus(name, Capture.NO, f"{' and '.join(hidden)}=true: input.value/output.value are hidden",
                             fix=" and ".join(f"{k}=false" for k in hidden))
    return ContentStatus(name, Capture.YES, "input.value and output.value captured (OPENINFERENCE_HIDE_INPUTS"
                         " and OPENINFERENCE_HIDE_OUTPUTS are not 'true'; the default)")


def _openllmetry(env: Mapping[str, str]) -> ContentStatus:
    name = "OpenLLMetry (Traceloop)"
    raw = _get(env, "TRACELOOP_TRACE_CONTENT")
    if not raw or raw.lower() == "true":
        return ContentStatus(name, Capture.YES, "TRACELOOP_TRACE_CONTENT is "
                             f"{'unset' if not raw else 'true'}: traceloop.entity.input/output captured")
    if raw.lower() in ("1", "yes", "on"):
        return ContentStatus(name, Capture.DEPENDS, f"TRACELOOP_TRACE_CONTENT={raw}: some OpenLLMetry packages"
                             " accept it, most compare with 'true' and capture nothing",
                             fix="TRACELOOP_TRACE_CONTENT=true")
    return ContentStatus(name, Capture.NO, f"TRACELOOP_TRACE_CONTENT={raw}: no content",
                         fix="TRACELOOP_TRACE_CONTENT=true")


def _strands(env: Mapping[str, str]) -> ContentStatus:
    name = "Strands Agents (native)"
    opt = _opt_ins(env)
    redact = next((t for t in opt if t.startswith("gen_ai_unredacted_attributes=")), None)
    if redact is not None:
        allowed = redact.partition("=")[2]
        if "gen_ai.tool.call" not in allowed and "gen_ai.*" not in allowed:
            return ContentStatus(name, Capture.NO, f"{_SEMCONV} has {redact!r}: tool arguments and results are"
                                 " replaced by a redaction marker",
                                 fix="add gen_ai.tool.call.* to gen_ai_unredacted_attributes, or drop the token")
    if _LATEST in opt:
        return ContentStatus(name, Capture.YES, f"{_SEMCONV}={_LATEST}: gen_ai.tool.call.arguments/result on"
                             " the tool spans")
    return ContentStatus(name, Capture.EVENTS, f"{_SEMCONV} lacks {_LATEST}: arguments and results only in the"
                         " span events gen_ai.tool.message / gen_ai.choice", fix=f"{_SEMCONV}={_LATEST}")


def _google_adk(env: Mapping[str, str]) -> ContentStatus:
    name = "Google ADK (native)"
    schema = _get(env, "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN")
    if schema in ("1", "otel_semconv_1_36"):
        flag = _get(env, "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS").lower()
        if flag in ("0", "false"):
            return ContentStatus(name, Capture.NO, "legacy schema with ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS="
                                 f"{flag}: no content", fix="ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=true")
        return ContentStatus(name, Capture.YES, "legacy schema (ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN="
                             f"{schema}): gcp.vertex.agent.tool_call_args / tool_response")
    raw = _get(env, _GENAI_CAPTURE)
    mode = raw.upper()
    if mode in ("SPAN_ONLY", "SPAN_AND_EVENT"):
        return ContentStatus(name, Capture.YES, f"{_GENAI_CAPTURE}={raw}: gen_ai.tool.call.arguments/result")
    if raw.lower() in ("1", "true"):
        return ContentStatus(name, Capture.NO, f"{_GENAI_CAPTURE}={raw} means EVENT_ONLY in ADK: content in log"
                             " records only", fix=f"{_GENAI_CAPTURE}=SPAN_ONLY")
    return ContentStatus(name, Capture.NO, f"{_GENAI_CAPTURE} {'unset' if not raw else '=' + raw}: tool spans"
                         " carry no arguments or results", fix=f"{_GENAI_CAPTURE}=SPAN_ONLY")


def _pydantic_ai(env: Mapping[str, str]) -> ContentStatus:
    del env
    return ContentStatus("Pydantic AI (native)", Capture.DEPENDS,
                         "set in code: InstrumentationSettings(include_content=True) is the default;"
                         " include_content=False drops arguments and results")


def _mcp_sdk(env: Mapping[str, str]) -> ContentStatus:
    del env
    return ContentStatus("MCP Python SDK (its own spans)", Capture.NO,
                         "the SDK's own `MCP send tools/call` spans never carry arguments or results;"
                         " OpenLLMetry's MCP instrumentation (opentelemetry-instrumentation-mcp, on mcp 1.x)"
                         " adds them (OpenInference's MCP instrumentation only propagates context)")


#: The table, most specific first (a span is matched to the first that fits).
SETTINGS: tuple[ContentSetting, ...] = (
    ContentSetting("Strands Agents (native)", ("strands-agents",), (_SEMCONV,), _strands,
                   "strands/telemetry/tracer.py (Tracer.start_tool_call_span, end_tool_call_span)"),
    ContentSetting("Google ADK (native)", ("google-adk",),
                   ("ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN", "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS", _GENAI_CAPTURE),
                   _google_adk, "google/adk/telemetry/context.py, tracing.py (trace_tool_call)"),
    ContentSetting("Pydantic AI (native)", ("pydantic-ai-slim", "pydantic-ai"), (), _pydantic_ai,
                   "pydantic_ai/models/instrumented.py (InstrumentationSettings.include_content)"),
    ContentSetting("MCP Python SDK (its own spans)", ("mcp",), (), _mcp_sdk, "mcp/shared/session.py"),
    ContentSetting("OpenInference", ("openinference-instrumentation-",),
                   ("OPENINFERENCE_HIDE_INPUTS", "OPENINFERENCE_HIDE_OUTPUTS"), _openinference,
                   "openinference/instrumentation/config.py (TraceConfig)"),
    ContentSetting("OpenLLMetry (Traceloop)", ("traceloop-sdk", "opentelemetry-semantic-conventions-ai"),
                   ("TRACELOOP_TRACE_CONTENT",), _openllmetry,
                   "opentelemetry/instrumentation/*/utils.py (should_send_prompts)"),
    ContentSetting("OpenTelemetry GenAI (opentelemetry-util-genai and the contrib instrumentations on it)",
                   ("opentelemetry-util-genai", "opentelemetry-instrumentation-genai-"), (_GENAI_CAPTURE, _SEMCONV),
                   _util_genai, "opentelemetry/util/genai/utils.py (get_content_capturing_mode)"),
)


def evaluate(environ: Mapping[str, str], distributions: Mapping[str, str] | None = None) -> list[ContentStatus]:
    """The meaning of the content settings in ``environ`` for every instrumentation in the
    table, or, given ``distributions`` (name → version of what is installed), for those
    whose distributions are installed."""
    out = []
    for setting in SETTINGS:
        if distributions is not None and not any(setting.applies_to(d) for d in distributions):
            continue
        out.append(setting.judge(environ))
    return out


#: ``gen_ai.operation.name`` values of the spans whose content the GenAI setting governs: tool
#: calls and inference (model) calls.
_GENAI_OPERATIONS = frozenset({"execute_tool", "chat", "generate_content", "text_completion"})


def setting_for_span(attributes: Mapping[str, object], scope: str = "") -> ContentSetting | None:
    """The table row of the instrumentation that wrote a tool span (or an inference span:
    the same settings govern the messages' content), from its convention markers and its
    instrumentation scope name, or None when it cannot be told."""
    scope = scope or ""
    by_name = {s.instrumentation: s for s in SETTINGS}
    if "openinference.span.kind" in attributes or scope.startswith("openinference."):
        return by_name["OpenInference"]
    if "traceloop.span.kind" in attributes or scope.startswith("traceloop"):
        return by_name["OpenLLMetry (Traceloop)"]
    if scope.startswith("strands"):
        return by_name["Strands Agents (native)"]
    if scope.startswith("gcp.vertex.agent") or any(str(k).startswith("gcp.vertex.agent.") for k in attributes):
        return by_name["Google ADK (native)"]
    if scope.startswith("pydantic-ai") or scope.startswith("pydantic_ai"):
        return by_name["Pydantic AI (native)"]
    if scope.startswith("mcp") or "mcp.method.name" in attributes:
        return by_name["MCP Python SDK (its own spans)"]
    if attributes.get("gen_ai.operation.name") in _GENAI_OPERATIONS:
        return by_name[SETTINGS[-1].instrumentation]
    return None


def advice_for_span(attributes: Mapping[str, object], environ: Mapping[str, str], scope: str = "") -> str:
    """One sentence for a tool span that arrived without content: which instrumentation
    wrote it, what its settings in ``environ`` mean, and what to set."""
    setting = setting_for_span(attributes, scope)
    if setting is None:
        return "tool spans carry no arguments or results; enable the instrumentation's content capture"
    status = setting.judge(environ)
    text = f"{status.instrumentation}: {status.detail}"
    return f"{text}; set {status.fix}" if status.fix else text
