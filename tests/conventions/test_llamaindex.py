"""LlamaIndex through OpenLLMetry (``opentelemetry-instrumentation-llamaindex``,
``dispatcher_wrapper.py``): every dispatcher span is ``traceloop.span.kind=task``; tool
calls are the agent workflow's ``call_tool`` step (``tool.name``, ``tool.arguments``; output
a ``ToolCallResult``) and a tool object's ``call`` / ``acall`` (span ``FunctionTool.task``,
input the bound ``{"args", "kwargs"}``, output a ``ToolOutput``)."""

from __future__ import annotations

import json

from otel_progress.conventions.spans import Lineage, SpanKind, classify, read_tool_call

from .helpers import record


def _tool_output(query: str) -> dict[str, object]:
    return {"content": "no match", "tool_name": "search", "raw_input": {"args": [], "kwargs": {"query": query}},
            "raw_output": "no match", "is_error": False}


def test_call_tool_step_is_the_tool_call() -> None:
    result = {"tool_name": "search", "tool_kwargs": {"query": "cats"}, "tool_id": "call_abc",
              "tool_output": _tool_output("cats"), "return_direct": False}
    # named after the class defining the step, as the real instrumentation names it
    span = record("BaseWorkflowAgent.task", {"traceloop.span.kind": "task",
                                             "traceloop.entity.name": "BaseWorkflowAgent.task",
                                     "tool.name": "search", "tool.arguments": json.dumps({"query": "cats"}),
                                     "traceloop.entity.input": json.dumps({"ev": "..."}),
                                     "traceloop.entity.output": json.dumps(result)})
    assert classify(span) is SpanKind.TOOL
    call = read_tool_call(span)
    assert (call.name, call.arguments, call.result) == ("search", json.dumps({"query": "cats"}), "no match")


def test_tool_object_span_and_nesting() -> None:
    outer = record("BaseWorkflowAgent.task", {"traceloop.span.kind": "task", "tool.name": "search"})
    inner = record("FunctionTool.task", {"traceloop.span.kind": "task",
                                         "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"query": "x"}}),
                                         "traceloop.entity.output": json.dumps(_tool_output("x"))},
                   parent=outer.span_id)
    assert classify(inner) is SpanKind.TOOL
    call = read_tool_call(inner)
    assert (call.name, call.arguments, call.result) == ("search", {"query": "x"}, "no match")
    lineage = Lineage()
    lineage.add_record(outer)
    assert lineage.resolve(inner.parent_id)[3]  # nested in the call_tool step: counted once


def test_other_tasks_are_not_tools() -> None:
    for name in ("SentenceSplitter.task", "OpenAI.task", "BaseWorkflowAgent.task", "Tool.task", "Tool2.task"):
        assert classify(record(name, {"traceloop.span.kind": "task"})) is SpanKind.OTHER, name
    assert classify(record("FunctionAgent.workflow", {"traceloop.span.kind": "workflow"})) is SpanKind.OTHER
