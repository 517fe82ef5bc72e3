"""Text and reasoning repeats (signals/text.py, ProgressEngine.observe_model): each rule
both ways.

1. The same text (identical once normalised, or reworded) a third time with nothing new
   between is ``text_repeat``; said twice (a conclusion restated once) it is not.
2. Reasoning is compared apart from text.
3. Streamed fragments and one call reported by two spans are one answer.
4. A new user message, or a tool step that brought something new, is news.
5. Texts without a content word ("ok", "Done.") are never compared.
6. The ladder: one detection per level on the same loop, nothing past park.
7. A run without model outputs keeps no model-side state.
"""

from __future__ import annotations

import pytest

from otel_progress import Config, ConfigError, Reason
from otel_progress.model import Level, ModelOutput

from .model_helpers import Script, request, say, script, tool

STUCK = "I could not find the configuration file in the repository, so I cannot continue with the deployment."
REWORDED = [
    STUCK,
    "I was unable to find the configuration file anywhere in the repository, so I cannot continue the deployment.",
    "The configuration file could not be found in the repository; I cannot continue with the deployment.",
]


def _brief(dets: list) -> list[tuple[str, int, str]]:
    return [(d.reason.value, int(d.level), d.span_id) for d in dets]


# -- 1. the same text, three times -------------------------------------------------------

def test_the_same_text_a_third_time_is_caught_on_that_output() -> None:
    dets = script([say(STUCK), say(STUCK), say(STUCK)])
    assert _brief(dets) == [("text_repeat", 1, "m3")]
    assert dict(dets[0].figures) == {"repeats": 3, "part": "text"}
    assert dets[0].turn == 0 and dets[0].tool == ""  # no tool step yet: the run's turn so far


def test_a_conclusion_restated_once_is_quiet() -> None:
    assert script([say(STUCK), say(STUCK)]) == []
    assert script([say(STUCK), say("Here is the plan: read the deployment notes first, then the manifest."),
                   say(STUCK)]) == []


def test_case_spacing_and_volatile_tokens_do_not_make_a_text_new() -> None:
    texts = ["The build failed at 2026-12-07T01:36:56Z after 0.53s with exit code 2.",
             "the build  failed at 2026-12-07T01:41:02Z after 0.61s with exit code 2.",
             "The Build failed at 2026-12-07T01:45:10Z after 0.48s\nwith exit code 2."]
    assert _brief(script([say(t) for t in texts])) == [("text_repeat", 1, "m3")]
    # a figure that changed is content: the exit code differs each time
    other = [t.replace("exit code 2", f"exit code {n}") for n, t in enumerate(texts)]
    assert script([say(t) for t in other]) == []


def test_a_reworded_text_is_the_same_text() -> None:
    assert _brief(script([say(t) for t in REWORDED])) == [("text_repeat", 1, "m3")]


def test_different_answers_are_quiet() -> None:
    texts = ["The configuration file is config/deploy.yaml and it names three services.",
             "The first service, api, is deployed to the eu-west cluster with two replicas.",
             "The second service, worker, consumes the orders queue and scales on its depth."]
    assert script([say(t) for t in texts]) == []


def test_a_new_figure_in_a_rewording_is_new() -> None:
    texts = [f"I could not find the configuration file in the repository after checking {n} directories."
             for n in (3, 7, 12)]
    assert script([say(t) for t in texts]) == []


# -- 2. reasoning apart from text -----------------------------------------------------------

def test_reasoning_repeats_are_caught_apart_from_text() -> None:
    thought = "The user wants the deployment; the configuration file is missing, so I should look for it again."
    dets = script([say(f"Attempt {n}: looking once more.", reasoning=thought) for n in range(3)])
    assert _brief(dets) == [("text_repeat", 1, "m3")]
    assert dets[0].figures["part"] == "reasoning"


def test_a_text_repeated_as_reasoning_is_not_a_repeat() -> None:
    assert script([say(STUCK), say(None, reasoning=STUCK), say(STUCK)]) == []


# -- 3. streams -----------------------------------------------------------------------------

def test_a_cumulative_stream_over_spans_is_one_answer() -> None:
    words = STUCK.split()
    parts = [" ".join(words[:n]) for n in (4, 8, 12, len(words))]
    assert script([say(p) for p in [*parts, parts[-1]]]) == []


def test_chunks_then_the_whole_answer_are_one_answer() -> None:
    chunks = ["I could not find the configuration file", " in the repository, so I cannot continue",
              " with the deployment."]
    assert script([say(c) for c in chunks] + [say("".join(chunks))]) == []


def test_one_call_reported_by_two_spans_counts_once() -> None:
    # a wrapper span and its inner call, each time: three answers, six spans
    items = []
    for n in range(3):
        items += [say(STUCK, t=n * 30, duration=9), say(STUCK, t=n * 30 + 1, duration=7)]
    dets = script(items)
    assert _brief(dets) == [("text_repeat", 1, "m5")]  # the third answer's first span
    assert script(items[:4]) == []


def test_an_output_reported_twice_counts_once() -> None:
    s = Script()
    s.feed([say(STUCK, span_id="a"), say(STUCK, span_id="b"), say(STUCK, span_id="b")])
    assert s.detections == []
    assert s.engine.stats.duplicates == 1


# -- 4. what is new ---------------------------------------------------------------------------

def test_a_chat_agent_answering_new_questions_the_same_way_is_quiet() -> None:
    answer = "Our support line is open Monday to Friday, nine to five, on the number printed on your invoice."
    asked = [say(answer, prompt=q) for q in ("When can I call?", "Is the line open on Saturday?",
                                              "what are your opening hours")]
    assert script(asked) == []
    same = [say(answer, prompt="When can I call?") for _ in range(3)]
    assert _brief(script(same)) == [("text_repeat", 1, "m3")]


def test_tool_calls_that_bring_something_new_between_are_news() -> None:
    items = []
    for n in range(3):
        items += [say(STUCK, request("search", {"q": f"config {n}"})),
                  tool("search", {"q": f"config {n}"}, f"{n + 1} hits: deploy/{n}.yaml")]
    assert script(items) == []


def test_tool_calls_that_bring_nothing_new_between_are_no_news() -> None:
    items = []
    for n in range(3):
        items += [say(STUCK, request("search", {"q": f"config {n}"})),
                  tool("search", {"q": f"config file {n}"}, "No results found.")]
    dets = script(items)
    assert _brief(dets)[:1] == [("text_repeat", 1, "m5")]
    assert dets[0].turn == 2  # after the run's two tool steps


def test_a_tool_call_still_buffered_when_the_model_answers_counts() -> None:
    """The reorder buffer holds the calls; those that started before the output are
    evaluated first: a new result among them is news."""
    items = []
    for n in range(3):
        items += [say(STUCK), tool("search", {"q": f"config {n}"}, f"{n + 1} hits: deploy/{n}.yaml")]
    s = Script(flush=False)
    s.feed(items[:2])
    assert s.engine.run_state("t1", "r").pending  # (buffered, not evaluated yet)
    s.feed(items[2:])
    s.end()
    assert s.detections == []
    # its twin: the buffered calls found nothing
    items = [say(STUCK), tool("search", {"q": "a"}, "No results found."), say(STUCK),
             tool("search", {"q": "b"}, "No results found."), say(STUCK)]
    assert _brief(script(items, flush=False))[:1] == [("text_repeat", 1, "m5")]


# -- 5. short texts ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["ok", "Done.", "OK!", "…", "  "])
def test_texts_without_a_content_word_are_never_compared(text: str) -> None:
    assert script([say(text) for _ in range(6)]) == []


def test_a_short_text_with_content_is_compared_identical_only() -> None:
    assert _brief(script([say("I cannot open that file.") for _ in range(3)])) == [("text_repeat", 1, "m3")]
    assert script([say("I cannot open that file."), say("That file won't open for me."),
                   say("I cannot open that file.")]) == []


# -- 6. the ladder ----------------------------------------------------------------------------

def test_one_detection_per_level_on_the_same_loop_and_nothing_past_park() -> None:
    s = Script()
    s.feed([say(STUCK) for _ in range(12)])
    s.end()
    assert [(d.reason.value, d.level, d.span_id) for d in s.detections] == [
        ("text_repeat", Level.NUDGE, "m3"), ("text_repeat", Level.RESTART, "m6"),
        ("text_repeat", Level.PARK, "m9")]
    assert s.engine.stats.suppressed == 1  # the fourth, counted, not announced


def test_a_tool_detection_resets_the_text_count() -> None:
    """A detection resets every signal, the model side's too: the next one needs new
    evidence."""
    loop = tool("read_file", {"path": "a"}, "the same text")
    s = Script()
    s.feed([say(STUCK), say(STUCK), loop, loop])
    assert [d.reason for d in s.detections] == [Reason.REPEAT_CYCLE]
    s.feed([say(STUCK)])  # would have been the third
    assert [d.reason for d in s.detections] == [Reason.REPEAT_CYCLE]


# -- 7. memory, settings, bad input -----------------------------------------------------------

def test_a_run_without_model_outputs_keeps_no_model_state() -> None:
    s = Script()
    s.feed([tool("search", {"q": str(n)}, f"{n} hits") for n in range(5)])
    run = s.engine.run_state("t1", "r")
    assert run is not None and run.model is None
    s.feed([say(None)])  # nothing captured: still nothing
    assert run.model is None
    s.feed([say(STUCK)])
    assert run.model is not None


def test_the_count_is_a_setting_and_the_signal_can_be_disabled() -> None:
    four = Config(text_repeat_count=4)
    assert script([say(STUCK) for _ in range(3)], four) == []
    assert _brief(script([say(STUCK) for _ in range(4)], four)) == [("text_repeat", 1, "m4")]
    assert script([say(STUCK) for _ in range(6)], Config(disabled_signals=frozenset({"text_repeat"}))) == []
    with pytest.raises(ConfigError, match="text_repeat_count"):
        Config(text_repeat_count=2)
    assert Config.from_env({"OTEL_PROGRESS_TEXT_REPEAT_COUNT": "5"}).text_repeat_count == 5


def test_bad_input_never_raises() -> None:
    s = Script()
    bad = [ModelOutput(trace_id="t1", text=123, reasoning=["x"], requests=None),  # type: ignore[arg-type]
           ModelOutput(trace_id="t1", text="x" * 100_000, prompt=5),  # type: ignore[arg-type]
           ModelOutput(trace_id=None, text=STUCK)]  # type: ignore[arg-type]
    for output in bad:
        assert s.engine.observe_model(output) == []
    assert s.engine.stats.errors == 0  # (read as far as it can be, not dropped by an exception)


def test_the_nudge_asks_for_a_hypothesis_before_answering_again() -> None:
    det = script([say(STUCK) for _ in range(3)])[0]
    assert "the model said the same thing 3 times" in det.nudge
    assert "Before answering again, write down what you believe is blocking progress" in det.nudge
    assert "- the same text from the model ×3, nothing new between" in det.handoff
    assert STUCK not in det.nudge and STUCK not in det.handoff  # never the text itself
