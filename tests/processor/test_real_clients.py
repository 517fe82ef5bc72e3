"""Spans from real instrumentation that no one here wrote, with no otel-progress code in
the agent: opentelemetry-util-genai's ``TelemetryHandler`` and a LangGraph agent
instrumented by OpenInference's LangChain instrumentor."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_progress import Config

from .conftest import PYTHON, SCRIPTS, make_rig, progress_attrs, progress_events, run_script


def _genai_run(mode: str) -> dict[str, Any]:
    pytest.importorskip("opentelemetry.util.genai.handler")
    proc = run_script([PYTHON, str(SCRIPTS / "genai_util_agent.py"), mode])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _captured(out: dict[str, Any]) -> bool:
    return any("gen_ai.tool.call.result" in s["attributes"] for s in out["spans"])


def test_util_genai_tool_loop_is_detected_on_the_tool_span() -> None:
    out = _genai_run("loop")
    if not _captured(out):
        pytest.skip("this opentelemetry-util-genai records no tool content on spans (0.4b0, the"
                    " newest release for SDK 1.40)")
    assert [(d["reason"], d["turn"], d["level"]) for d in out["detections"]] == [("barren", 4, 1)]
    det = out["detections"][0]
    spans = {s["span_id"]: s for s in out["spans"]}
    tool = spans[det["span_id"]]
    assert tool["name"] == "execute_tool search_docs"
    assert tool["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert tool["attributes"]["progress.detected"] is True
    assert tool["attributes"]["progress.reason"] == "barren"
    assert [e[0] for e in tool["events"]] == ["no_progress"]
    assert tool["events"][0][1]["progress.turn"] == 4
    agent = next(s for s in out["spans"] if s["name"].startswith("invoke_agent"))
    assert [e[0] for e in agent["events"]] == ["no_progress"]
    assert det["agent"] == "docs-loop"
    others = [s for s in out["spans"] if s["span_id"] not in (det["span_id"], agent["span_id"])]
    assert all(not s["events"] and "progress.detected" not in s["attributes"] for s in others)


def test_util_genai_healthy_run_is_left_alone() -> None:
    out = _genai_run("healthy")
    assert out["detections"] == []
    assert all(not s["events"] and "progress.detected" not in s["attributes"] for s in out["spans"])
    assert len(out["spans"]) == 8


# -- LangGraph + OpenInference ---------------------------------------------------------------


def _langgraph_agent(results: list[str]) -> Any:
    fake = pytest.importorskip("langchain_core.language_models.fake_chat_models")
    messages = pytest.importorskip("langchain_core.messages")
    tools = pytest.importorskip("langchain_core.tools")
    prebuilt = pytest.importorskip("langgraph.prebuilt")

    class ScriptedChat(fake.FakeMessagesListChatModel):  # type: ignore[misc,name-defined]
        """A chat model that plays a script: call the search tool, again and again."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
            return self

    calls = iter(results)

    @tools.tool
    def search_docs(q: str) -> str:
        """Search the product documentation."""
        return next(calls)

    script = [messages.AIMessage(content="", tool_calls=[
        {"name": "search_docs", "args": {"q": f"refund policy, attempt {i}"}, "id": f"call_{i:03d}"}])
        for i in range(len(results))]
    script.append(messages.AIMessage(content="I could not find the refund policy."))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return prebuilt.create_react_agent(ScriptedChat(responses=script), [search_docs], name="docs_agent")


@pytest.fixture
def openinference() -> Any:
    module = pytest.importorskip("openinference.instrumentation.langchain")
    instrumentor = module.LangChainInstrumentor()
    yield instrumentor
    instrumentor.uninstrument()


# OpenInference records a LangChain tool's output as the whole ToolMessage, whose
# ``tool_call_id`` differs on every call: the default volatile keys must strip it.
_CONFIG = Config()


def test_langgraph_loop_is_detected_on_the_openinference_tool_span(openinference: Any) -> None:
    r = make_rig(_CONFIG)
    openinference.instrument(tracer_provider=r.provider)
    agent = _langgraph_agent([json.dumps({"results": [], "total": 0})] * 8)
    agent.invoke({"messages": [("user", "What is the refund policy?")]}, {"recursion_limit": 60})
    assert r.detections, "the loop was not detected"
    first = r.detections[0]
    assert (first.reason.value, first.tool) == ("barren", "search_docs")
    spans = r.by_id()
    tool = spans[first.span_id]
    assert tool.attributes["openinference.span.kind"] == "TOOL"
    assert tool.name == "search_docs"
    assert progress_attrs(tool) == first.span_attributes()
    assert progress_events(tool) == [("no_progress", first.event_attributes())]
    root = next(s for s in r.spans() if s.parent is None)
    assert root.name == "docs_agent"
    assert ("no_progress", first.event_attributes()) in progress_events(root)
    annotated = {format(s.context.span_id, "016x") for s in r.spans() if progress_events(s)}
    assert annotated == {d.span_id for d in r.detections} | {format(root.context.span_id, "016x")}


def test_langgraph_healthy_run_is_left_alone(openinference: Any) -> None:
    r = make_rig(_CONFIG)
    openinference.instrument(tracer_provider=r.provider)
    results = [json.dumps({"results": [f"doc-{i}: refunds, section {i}"], "total": 1}) for i in range(8)]
    agent = _langgraph_agent(results)
    agent.invoke({"messages": [("user", "What is the refund policy?")]}, {"recursion_limit": 60})
    assert r.detections == []
    assert len([s for s in r.spans() if s.attributes.get("openinference.span.kind") == "TOOL"]) == 8
    assert all(not progress_attrs(s) and not progress_events(s) for s in r.spans())
