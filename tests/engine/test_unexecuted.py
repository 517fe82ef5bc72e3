"""Requested but never executed (signals/unexecuted.py, engine/modelside.py): each rule
both ways.

1. A request no tool call answered by the time the model answers again is unexecuted
   (``unanswered``); the same one ``unexecuted_count`` (3) times with nothing new between
   is ``unexecuted_repeat``. A request answered (by call id, else by name and canonical
   arguments; parallel requests each), even by a call still in the reorder buffer or one
   that arrives late, is not.
2. A refused call (``executed`` False) is an unexecuted request (``refused``), never a step
   of the run nor a failure of the tool; a run of refusals of the same action is a loop.
3. The run's last requests, never answered because the run ended, are not judged.
4. The ladder and the memory of runs without model outputs.
"""

from __future__ import annotations

from otel_progress import Config
from otel_progress.engine.config import SIGNAL_NAMES
from otel_progress.model import Level

from .model_helpers import Script, refuse, request, say, script, tool

ARGS = {"path": "deploy/config.yaml", "mode": "strict"}
#: only the model-side signals (the tool signals would judge the repeated calls of a script)
MODEL_ONLY = Config(disabled_signals=frozenset(SIGNAL_NAMES) - {"text_repeat", "unexecuted"})


def _brief(dets: list) -> list[tuple[str, int, str]]:
    return [(d.reason.value, int(d.level), d.span_id) for d in dets]


def _asks(n: int, name: str = "read_config", args: dict | None = None, **fields) -> list:
    """``n`` outputs, each asking for the same call and nothing else (the framework's error
    fed back is the model's input, not a tool step)."""
    return [say(None, request(name, ARGS if args is None else args, f"call{i}"), **fields) for i in range(n)]


# -- 1. unanswered ----------------------------------------------------------------------------

def test_the_same_request_never_answered_three_times_is_caught_when_the_model_answers_again() -> None:
    assert script(_asks(3)) == []  # the third is judged only at the fourth output
    dets = script(_asks(4))
    assert _brief(dets) == [("unexecuted_repeat", 1, "m4")]
    assert dict(dets[0].figures) == {"unexecuted": 3, "cause": "unanswered", "requested_tool": "read_config"}
    assert dets[0].tool == "read_config" and dets[0].turn == 0


def test_requests_answered_by_their_call_ids_are_quiet() -> None:
    items = []
    for i in range(5):
        items += [say(None, request("read_config", ARGS, f"call{i}")),
                  tool("read_config", ARGS, f"version: {i}", call_id=f"call{i}")]
    assert script(items) == []


def test_requests_answered_by_name_and_canonical_arguments_are_quiet() -> None:
    """No call ids: the tool name and the arguments, whatever their key order or form."""
    items = []
    for i in range(5):
        items += [say(None, request("read_config", {"path": f"deploy/{i}.yaml", "mode": "strict"})),
                  tool("read_config", f'{{"mode": "strict", "path": "deploy/{i}.yaml"}}', f"version: {i}")]
    assert script(items) == []


def test_a_call_of_another_request_does_not_answer() -> None:
    """The tool ran, with other arguments: the request itself never ran."""
    items = []
    for i in range(4):
        items += [say(None, request("read_config", ARGS)),
                  tool("read_config", {"path": f"other/{i}.yaml"}, "No such file.", error=True)]
    assert _brief(script(items))[:1] == [("unexecuted_repeat", 1, "m7")]


def test_a_call_still_buffered_when_the_model_answers_again_counts_as_the_answer() -> None:
    items = []
    for i in range(5):
        items += [say(None, request("read_config", ARGS, f"call{i}")),
                  tool("read_config", ARGS, f"version: {i}", call_id=f"call{i}")]
    s = Script(flush=False)
    s.feed(items[:2])
    assert s.engine.run_state("t1", "r").pending  # (the answer waits in the reorder buffer)
    s.feed(items[2:])
    s.end()
    assert s.detections == []


def test_a_request_executed_later_is_not_unexecuted() -> None:
    """A call whose span arrives after the model answered again (out of order) answers the
    request: the count so far is forgotten."""
    s = Script()
    s.feed(_asks(3))  # two judged unanswered
    s.feed([tool("read_config", ARGS, "version: 1", t=5)])  # it did run, after the first output
    s.feed(_asks(2))
    assert s.detections == []
    s.feed(_asks(1))  # and now it stops running: counted afresh from the third output's
    assert _brief(s.detections) == [("unexecuted_repeat", 1, "m7")]


def test_parallel_requests_are_matched_each() -> None:
    items = []
    for i in range(4):  # two requests an output, the listing ran (and found nothing), the read never
        items += [say(None, request("list_dir", {"path": f"d{i}"}), request("read_config", ARGS)),
                  tool("list_dir", {"path": f"d{i}"}, "")]
    dets = script(items)
    assert _brief(dets)[:1] == [("unexecuted_repeat", 1, "m7")]
    assert dets[0].figures["requested_tool"] == "read_config"
    items = []
    for i in range(4):  # both ran
        items += [say(None, request("list_dir", {"path": f"d{i}"}), request("read_config", ARGS)),
                  tool("list_dir", {"path": f"d{i}"}, "", t=i * 30 + 2),
                  tool("read_config", ARGS, "", t=i * 30 + 3)]
    assert script(items, MODEL_ONLY) == []  # (the tool signals see the read repeated: theirs to judge)


def test_a_duplicated_request_run_once_is_quiet() -> None:
    """The model asked twice for the same call in one output and the harness ran it once:
    the request ran."""
    two = [request("read_config", ARGS), request("read_config", ARGS)]
    items = []
    for _ in range(4):
        items += [say(None, *two), tool("read_config", ARGS, "")]
    assert script(items, MODEL_ONLY) == []


def test_different_requests_unanswered_in_turn_are_counted_apart() -> None:
    items = [say(None, request("read_config", {"path": f"deploy/{i}.yaml"})) for i in range(6)]
    assert script(items) == []


def test_something_new_between_is_news() -> None:
    items = []
    for i in range(5):
        items += [say(None, request("read_config", ARGS), request("search", {"q": f"config {i}"})),
                  tool("search", {"q": f"config {i}"}, f"{i + 1} hits: deploy/{i}.yaml")]
    assert script(items) == []
    # the twin: the other requests ran and found nothing
    items = []
    for i in range(5):
        items += [say(None, request("read_config", ARGS), request("search", {"q": f"config {i}"})),
                  tool("search", {"q": f"config {i}"}, "No results found.")]
    assert _brief(script(items))[:1] == [("unexecuted_repeat", 1, "m7")]


def test_a_new_user_message_is_news() -> None:
    items = [say(None, request("read_config", ARGS), prompt=f"question {i}") for i in range(6)]
    assert script(items) == []


# -- 2. refused -------------------------------------------------------------------------------

def test_a_run_of_refusals_of_the_same_action_is_caught_on_the_third() -> None:
    s = Script()
    s.feed([refuse("Bash", {"command": "rm -rf build"}) for _ in range(3)])
    assert _brief(s.detections) == [("unexecuted_repeat", 1, "c3")]
    assert dict(s.detections[0].figures) == {"unexecuted": 3, "cause": "refused", "requested_tool": "Bash"}
    run = s.engine.run_state("t1", "r")
    assert run.turn == 0 and s.engine.stats.calls == 0  # never a step


def test_refusals_are_never_a_repeat_or_a_failure_of_the_tool() -> None:
    off = Config(disabled_signals=frozenset({"unexecuted"}))
    assert script([refuse("Bash", {"command": "rm -rf build"}) for _ in range(8)], off) == []


def test_refusals_of_different_actions_and_a_refusal_then_a_run_are_quiet() -> None:
    alternating = [refuse("Bash", {"command": c}) for c in ("rm -rf build", "git push -f")] * 2
    assert script(alternating) == []
    then_ran = [refuse("Bash", {"command": "make"}), refuse("Bash", {"command": "make"}),
                tool("Bash", {"command": "make"}, "built 3 targets"), refuse("Bash", {"command": "make"})]
    assert script(then_ran) == []


def test_a_refused_request_is_counted_once() -> None:
    """The output's request and its refusal record are one unexecuted request."""
    items = []
    for i in range(3):
        items += [say(None, request("Bash", {"command": "rm -rf build"}, f"call{i}")),
                  refuse("Bash", {"command": "rm -rf build"}, call_id=f"call{i}")]
    s = Script()
    s.feed(items[:4])
    assert s.detections == []  # two refusals, not four
    s.feed(items[4:])
    assert _brief(s.detections) == [("unexecuted_repeat", 1, "c6")]
    assert s.detections[0].figures["cause"] == "refused"


# -- 3. the end of a run ----------------------------------------------------------------------

def test_the_last_requests_of_a_run_are_not_judged() -> None:
    s = Script()
    s.feed(_asks(3))
    s.end()
    assert s.detections == []


# -- 4. the ladder, memory --------------------------------------------------------------------

def test_one_detection_per_level_and_nothing_past_park() -> None:
    dets = script(_asks(14))
    assert [(d.level, d.span_id) for d in dets] == [(Level.NUDGE, "m4"), (Level.RESTART, "m7"),
                                                     (Level.PARK, "m10")]


def test_interleaved_with_tool_steps_that_bring_nothing_new() -> None:
    items = []
    for i in range(4):
        items += [say(None, request("read_config", ARGS)), tool("list_dir", {"path": f"d{i}"}, "")]
    dets = script(items)
    assert _brief(dets)[:1] == [("unexecuted_repeat", 1, "m7")]
    assert dets[0].turn == 3


def test_the_count_is_a_setting() -> None:
    assert script(_asks(5), Config(unexecuted_count=5)) == []
    assert _brief(script(_asks(6), Config(unexecuted_count=5))) == [("unexecuted_repeat", 1, "m6")]
    assert Config.from_env({"OTEL_PROGRESS_UNEXECUTED_COUNT": "4"}).unexecuted_count == 4


def test_a_run_without_model_outputs_or_refusals_keeps_no_model_state() -> None:
    s = Script()
    s.feed([tool("read_config", ARGS, f"version: {i}") for i in range(4)])
    run = s.engine.run_state("t1", "r")
    assert run.model is None
    s.feed([refuse("Bash", {"command": "make"})])
    assert run.model is not None


def test_the_nudge_asks_why_the_call_did_not_run_and_the_handoff_names_it() -> None:
    det = script(_asks(4))[0]
    assert "Before requesting that call again, write down why you believe it did not run" in det.nudge
    assert "- requested read_config(…) ×3, never run (unanswered)" in det.handoff
    assert "deploy/config.yaml" not in det.nudge + det.handoff  # names and counts, never arguments


def test_odd_requests_never_raise() -> None:
    from otel_progress.model import ModelOutput, ToolRequest

    class Odd:
        def __repr__(self) -> str:
            raise ValueError("no")

    s = Script()
    outputs = [ModelOutput(trace_id="t1", run_id="r", span_id=f"x{i}", text=None,
                           requests=(ToolRequest("read_config", Odd()), "not a request",  # type: ignore[arg-type]
                                     ToolRequest(None, {}), ToolRequest("read_config", {"a": {1, 2}}, 5)))  # type: ignore[arg-type]
               for i in range(5)]
    for output in outputs:
        s.engine.observe_model(output)  # never raises, nor loses the output
    assert s.engine.stats.errors == 0
