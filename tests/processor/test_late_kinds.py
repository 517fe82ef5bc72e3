"""Spans whose kind is known only after they started (Google ADK sets
``gen_ai.operation.name`` on its ``invoke_agent`` span right after starting it, and on
its ``execute_tool`` spans when they end), through the real SDK."""

from __future__ import annotations

import json

import pytest
from opentelemetry import trace

from .conftest import make_rig, progress_events


def _late_agent_run(tracer: trace.Tracer, late_tools: bool, turns: int = 6) -> str:
    """An ADK-shaped trace: a plain ``invocation`` root, an ``invoke_agent`` span that
    becomes an agent by ``set_attribute`` after it started, model and tool calls under it
    (the tools' kind set at their start, or only at their end). Returns the agent's id."""
    with tracer.start_as_current_span("invocation"):
        agent = tracer.start_span("invoke_agent weather_agent")
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        agent.set_attribute("gen_ai.agent.name", "weather_agent")
        with trace.use_span(agent, end_on_exit=True):
            for i in range(turns):
                with tracer.start_as_current_span("call_llm") as llm:
                    llm.set_attribute("gen_ai.usage.input_tokens", 100)
                tool_attrs = {} if late_tools else {"gen_ai.operation.name": "execute_tool"}
                with tracer.start_as_current_span("execute_tool get_weather", attributes=tool_attrs) as tool:
                    tool.set_attribute("gen_ai.tool.name", "get_weather")
                    tool.set_attribute("gen_ai.tool.call.arguments", json.dumps({"city": f"Paris {i}"}))
                    tool.set_attribute("gen_ai.tool.call.result", json.dumps({"results": []}))
                    if late_tools:  # (ADK's trace_tool_call, at the end of the call)
                        tool.set_attribute("gen_ai.operation.name", "execute_tool")
        return format(agent.get_span_context().span_id, "016x")


@pytest.mark.parametrize("analysis", ["inline", "background"])
@pytest.mark.parametrize("late_tools", [False, True], ids=["tools-known-at-start", "tools-known-at-end"])
def test_an_agent_span_that_becomes_one_after_it_started_is_the_run(analysis: str, late_tools: bool) -> None:
    r = make_rig(analysis=analysis)
    agent_id = _late_agent_run(r.provider.get_tracer("tests"), late_tools)
    spans = r.spans()
    assert r.processor.processor_errors == 0
    assert r.detections, "the loop under the late agent span was not detected"
    det = r.detections[0]
    assert (det.reason.value, det.turn) == ("barren", 4)
    assert det.run_id == agent_id and det.agent == "weather_agent"  # its own run, not the trace's
    agent = next(s for s in spans if s.name == "invoke_agent weather_agent")
    assert ("no_progress", det.event_attributes()) in progress_events(agent)
    root = next(s for s in spans if s.name == "invocation")
    assert progress_events(root) == []  # not taken for calls outside any agent
    assert (r.processor.open_spans, r.processor.tracked_traces, r.processor.active_runs) == (0, 0, 0)
    r.provider.shutdown()


def test_two_late_agents_in_one_trace_are_two_runs() -> None:
    """Each late agent's calls count in its own run: a healthy agent's calls do not
    dilute (or join) the looping agent's."""
    r = make_rig(analysis="inline")
    tracer = r.provider.get_tracer("tests")
    with tracer.start_as_current_span("invocation"):
        ids = []
        for name, healthy in (("a", True), ("b", False)):
            agent = tracer.start_span(f"invoke_agent {name}")
            agent.set_attributes({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name})
            ids.append(format(agent.get_span_context().span_id, "016x"))
            with trace.use_span(agent, end_on_exit=True):
                for i in range(5):
                    with tracer.start_as_current_span("execute_tool search") as tool:
                        tool.set_attributes({"gen_ai.tool.name": "search", "gen_ai.tool.call.arguments":
                                             json.dumps({"q": f"{name}{i}"}), "gen_ai.tool.call.result":
                                             json.dumps({"results": [f"{name}{i}"] if healthy else []}),
                                             "gen_ai.operation.name": "execute_tool"})
    assert {d.run_id for d in r.detections} == {ids[1]}
    assert {d.agent for d in r.detections} == {"b"}
    r.provider.shutdown()
