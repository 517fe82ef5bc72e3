"""LlamaIndex through OpenLLMetry (``opentelemetry-instrumentation-llamaindex``,
``dispatcher_wrapper.py`` ``OpenLLMetrySpanHandler.new_span``).

Every span of LlamaIndex's dispatcher is ``traceloop.span.kind=task`` (``workflow`` for a
root), named ``{class}.task`` (a workflow step: ``{method}.task``), with the bound
arguments in ``traceloop.entity.input`` and ``json.dumps`` of the return value in
``traceloop.entity.output``. A tool call is told from other tasks in two ways:

* the agent workflow's ``call_tool`` step (``FunctionAgent``, ``ReActAgent``, ...): the span
  (named after the class that defines the step, ``BaseWorkflowAgent.task``, as seen with
  ``opentelemetry-instrumentation-llamaindex`` and ``llama-index-core`` in the framework
  matrix) carries ``tool.name`` and ``tool.arguments`` (JSON of the call's
  ``tool_kwargs``); its output is a ``ToolCallResult`` whose ``tool_output`` is a
  ``ToolOutput``, reduced to the tool's ``raw_output``.
* a tool object's own ``call`` / ``acall`` (``FunctionTool``, ``QueryEngineTool``, ...: a
  ``BaseTool`` subclass, whose class name ends in ``Tool``): the span ``FunctionTool.task``,
  input ``{"args": [], "kwargs": {...}}``, output a ``ToolOutput`` (whose ``tool_name``
  names the tool). Inside ``call_tool`` it is a nested tool span and counted once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import SpanConvention, ToolContent, as_text, decode_json
from .openllmetry import INPUT, KIND, OUTPUT
from .record import SpanKind, SpanRecord

__all__ = ["LlamaIndexConvention"]

_TASK_KINDS = ("task", "workflow")


def _is_tool_class_span(name: Any) -> bool:
    if not isinstance(name, str) or not name.endswith(".task"):
        return False
    cls = name[: -len(".task")]
    return len(cls) > 4 and cls.endswith("Tool") and cls.isalpha()


def _tool_output(result: Any) -> Any:
    """``ToolCallResult`` -> its ``tool_output`` (then reduced by the facade)."""
    decoded = decode_json(result) if isinstance(result, str) and '"tool_output"' in result else result
    if isinstance(decoded, Mapping) and "tool_output" in decoded and "tool_name" in decoded:
        return decoded.get("tool_output")
    return result


class LlamaIndexConvention(SpanConvention):
    """LlamaIndex tool calls among OpenLLMetry's ``task`` spans."""

    name = "llamaindex-openllmetry"
    marker_keys = frozenset({KIND})
    marker_bytes = (b".span.kind",)

    def classify(self, span: SpanRecord) -> SpanKind | None:
        a = span.attributes
        if a.get(KIND) not in _TASK_KINDS:
            return None
        if as_text(a.get("tool.name")) or _is_tool_class_span(span.name):
            return SpanKind.TOOL
        return None

    def read_tool(self, span: SpanRecord) -> ToolContent | None:
        a = span.attributes
        if a.get(KIND) not in _TASK_KINDS:
            return None
        name = as_text(a.get("tool.name"))
        if name:
            arguments = a.get("tool.arguments")
            if arguments is None:
                arguments = a.get(INPUT)
            result = a.get(OUTPUT)
            return ToolContent(name, arguments, None if result is None else _tool_output(result))
        if not _is_tool_class_span(span.name):
            return None
        result = a.get(OUTPUT)
        decoded = decode_json(result)
        tool = as_text(decoded.get("tool_name")) if isinstance(decoded, Mapping) else None
        return ToolContent(tool or span.name[: -len(".task")], a.get(INPUT), result)
