"""Every trace in the four seed documents, as a scenario with its expected outcome."""

from __future__ import annotations

from otel_progress import Config, Level, Reason, Scope, ToolCall
from otel_progress.engine import ProgressEngine

from .helpers import S, as_json, brief, call, manifest_config, run

# --- seed 000: "A stuck run is one where nothing new entered the context" -----------------

DEPLOY = [
    call("get_build_status", {"build_id": "b_88231"}, as_json({"status": "queued", "jobs": "0/4"})),
    call("get_build_status", {"build_id": "b_88231"}, as_json({"status": "running", "jobs": "1/4"})),
    call("get_build_status", {"build_id": "b_88231"}, as_json({"status": "running", "jobs": "1/4"})),
]


def test_000_deploy_poll_is_healthy_with_the_manifest() -> None:
    assert run(DEPLOY, manifest_config()) == []


def test_000_deploy_poll_is_healthy_without_a_manifest_while_status_is_waiting() -> None:
    # A build 'running' is a wait; only a key-only detector calls this a loop.
    assert run(DEPLOY) == []


def test_000_deploy_poll_without_any_wait_knowledge_is_a_repeat() -> None:
    # The result is part of the key: step 9 equals step 8, and nothing says it is a wait.
    assert brief(run(DEPLOY, Config(implicit_waits=False))) == [(3, "repeat_cycle", 1)]


def test_000_build_waits_four_minutes_at_running_then_succeeds() -> None:
    polls = [call("get_build_status", {"build_id": "b_1"}, as_json({"status": "running", "jobs": "1/4"}))] * 48
    polls.append(call("get_build_status", {"build_id": "b_1"}, as_json({"status": "success"})))
    polls.append(call("merge_pr", {"pr": 7}, "merged"))
    assert run(polls, manifest_config(), gap=5) == []


def test_000_poll_after_terminal_value_is_a_detection() -> None:
    seq = [*DEPLOY, call("get_build_status", {"build_id": "b_88231"}, as_json({"status": "success"})),
           call("get_build_status", {"build_id": "b_88231"}, as_json({"status": "success"}))]
    dets = run(seq, manifest_config())
    assert brief(dets) == [(5, "poll_after_terminal", 1)]
    assert dets[0].event == "no_progress"


def test_000_wait_budget_exhausted_is_a_wait_timeout() -> None:
    seq = [call("get_build_status", {"build_id": "never"}, as_json({"status": "queued"}))] * 25
    dets = run(seq, manifest_config(), gap=60)  # 25 polls a minute apart: past 1200 s
    assert dets[0].reason is Reason.WAIT_TIMEOUT
    assert dets[0].turn == 21
    assert dets[0].figures["max_wait_seconds"] == 1200


def test_000_unknown_status_stops_the_exemption_on_first_occurrence() -> None:
    seq = [*DEPLOY[:2], call("get_build_status", {"build_id": "b_88231"}, as_json({"status": "unknown"}))]
    assert brief(run(seq, manifest_config())) == [(3, "unknown_wait_state", 1)]


def test_000_polling_faster_than_declared_loses_the_exemption() -> None:
    seq = [call("get_build_status", {"build_id": "b"}, as_json({"status": "running"}))] * 3
    # The first poll is exempt; the next two, 1 s apart (under 5 s), are ordinary steps.
    assert brief(run(seq, manifest_config(), gap=1)) == [(3, "repeat_cycle", 1)]


DOCS = [
    call("search_docs", {"q": q}, "0 results")
    for q in ("refund policy", "refund policy annual plans", "annual plan refund rules",
              "what is the refund policy for annual subscriptions")
]


def test_000_rephrased_search_returning_nothing_is_barren() -> None:
    dets = run(DOCS)
    assert brief(dets) == [(4, "barren", 1)]
    assert dets[0].figures == {"barren_steps": 4}


def test_000_rephrased_search_with_structured_empty_results() -> None:
    seq = [call("search_docs", {"q": f"refund {i}"}, as_json({"results": [], "total": 0})) for i in range(4)]
    assert brief(run(seq)) == [(4, "barren", 1)]


def test_000_three_empty_searches_then_a_hit_is_healthy() -> None:
    seq = [*DOCS[:3], call("search_docs", {"q": "refunds"}, "1 result: Refunds for annual plans")]
    assert run(seq) == []


def _code_fix(cycles: int, with_state: bool) -> list[dict]:
    seq = []
    for _ in range(cycles):
        seq += [
            call("edit_file", {"path": "exporter.py", "patch": "add null check at line 40"}, "ok",
                 **({"state": "tree-1"} if with_state else {})),
            call("run_tests", {}, "1 failed (test_export_handles_empty_rows)",
                 **({"state": "tree-1"} if with_state else {})),
            call("edit_file", {"path": "exporter.py", "patch": "revert null check"}, "ok",
                 **({"state": "tree-0"} if with_state else {})),
            call("run_tests", {}, "1 failed (test_export_handles_empty_rows)",
                 **({"state": "tree-0"} if with_state else {})),
        ]
    return seq


def test_000_edit_revert_with_state_digest_fires_by_the_second_cycle() -> None:
    dets = run(_code_fix(2, with_state=True), manifest_config())
    assert dets, "edit/test/revert/test must be caught"
    # the tests' third identical failure across the edits (same_answer, turn 6) or the state
    # revisit, whichever comes first: both by the second cycle
    assert dets[0].reason in (Reason.STATE_REVISIT, Reason.SAME_ANSWER)
    assert dets[0].turn <= 8  # the second cycle is turns 5-8


def test_000_edit_revert_without_state_is_still_caught_by_repetition() -> None:
    dets = run(_code_fix(2, with_state=False), manifest_config())
    assert dets and dets[0].turn <= 8
    assert dets[0].reason in (Reason.REPEAT_CYCLE, Reason.FREQUENCY, Reason.SAME_ANSWER)


def test_000_volatile_envelope_fields_do_not_make_every_result_new() -> None:
    seq = [
        call("get_inventory", {"sku": "A1"},
             as_json({"count": 0, "served_at": f"2026-03-17T09:12:{40 + i}.181Z", "request_id": f"r{i}",
                      "etag": f'"v{i}"', "latency_ms": 10 + i}))
        for i in range(3)
    ]
    assert brief(run(seq)) == [(2, "repeat_cycle", 1)]


def test_000_rewriting_the_same_scratchpad_is_not_progress_when_state_is_published() -> None:
    seq = [call("edit_file", {"path": "notes.md", "text": f"draft {i}"}, "ok", state="notes-v1") for i in range(6)]
    dets = run(seq, manifest_config())
    assert dets and dets[0].reason is Reason.BARREN


def test_000_writes_that_change_the_state_are_progress() -> None:
    seq = [call("edit_file", {"path": f"f{i}.py", "text": "x"}, "ok", state=f"tree-{i}") for i in range(8)]
    assert run(seq, manifest_config()) == []


def test_000_steady_wrong_progress_is_not_detected() -> None:
    # The documented limitation: different documents each time are motion, not direction.
    seq = [call("search", {"q": f"q{i}"}, f"doc {i}: unrelated text {i}") for i in range(8)]
    assert run(seq) == []


# --- seed 002: the situation ------------------------------------------------------------

A = call("get_order", {"id": 123}, '{"status": "shipped"}')
B = call("get_shipment", {"id": 123}, '{"eta": "Friday"}')
C = call("get_invoice", {"id": 123}, '{"total": 40}')


def test_002_alternating_pair_fires_at_turn_4() -> None:
    assert brief(run([A, B] * 12)[:1]) == [(4, "repeat_cycle", 1)]


def test_002_three_call_cycle_fires_at_turn_6() -> None:
    dets = run([A, B, C] * 8)
    assert brief(dets[:1]) == [(6, "repeat_cycle", 1)]
    assert dets[0].figures["period"] == 3


def test_002_reordered_argument_keys_are_the_same_call() -> None:
    seq = [call("get_order", {"id": 123, "full": True}, "x"), call("get_order", {"full": True, "id": 123}, "x")]
    assert brief(run(seq)) == [(2, "repeat_cycle", 1)]


def test_002_retry_after_timeout_that_worked_is_healthy() -> None:
    seq = [call("get_order", {"id": 123}, None, error=True, error_type="TimeoutError",
                error_message="timed out after 5 s"), A, call("reply", {"text": "shipped"}, "sent")]
    assert run(seq) == []


# --- seed 003: state signatures -------------------------------------------------------------

def _reconciliation(livelocked: bool) -> list[dict]:
    """run_9402 (progressing: each fetch brings a new statement) vs run_9417 (livelocked:
    the vendor has nothing newer, so re-fetching v3 admits nothing new)."""
    seq = []
    versions = ["v2", "v3", "v3", "v3"] if livelocked else ["v2", "v3", "v4", "v5"]
    for v in versions:
        seq.append(call("verify_totals", {"ledger": "L-7"}, as_json({"mismatch": "$4,102.50"}),
                        node="verify_totals"))
        text = "acme statement, latest is v2" if livelocked else f"acme statement {v}"
        seq.append(call("fetch_statement", {"vendor": "acme", "version": v},
                        as_json({"statement": text, "lines": 40}), node="gather"))
    return seq


def test_003_progressing_reconciliation_is_not_a_livelock() -> None:
    dets = run(_reconciliation(livelocked=False))
    assert all(d.reason is not Reason.SIGNATURE_REPEAT for d in dets)


def test_003_livelocked_reconciliation_fires_livelock_with_tokens_burned() -> None:
    engine = ProgressEngine(Config(disabled_signals=frozenset({"repeat", "frequency", "barren", "same_answer"})))
    dets = []
    for c in _make(_reconciliation(livelocked=True)):
        engine.record_tokens("t1", "", 27_000)  # each model turn costs tokens
        dets += engine.observe(c, flush=True)
    live = [d for d in dets if d.reason is Reason.SIGNATURE_REPEAT]
    assert live, brief(dets)
    assert live[0].event == "livelock"
    assert live[0].turn == 7  # verify_totals at turns 3, 5 and 7 with an empty delta
    assert live[0].figures["visits"] == 3
    assert live[0].figures["tokens_burned"] == 4 * 27_000
    assert len(live[0].figures["signature"]) == 16


def _make(seq: list[dict]) -> list[ToolCall]:
    from .helpers import make_calls

    return make_calls(seq)


def test_003_normaliser_collapses_case_and_spacing() -> None:
    seq = [
        call("search_clauses", {"q": "indemnity cap"}, "[]", node="review"),
        call("read_page", {"page": 1}, "page one text", node="review"),
        call("search_clauses", {"q": "Indemnity  Cap"}, "[]", node="review"),
        call("read_page", {"page": 1}, "page one text", node="review"),
        call("search_clauses", {"q": "INDEMNITY cap "}, "[]", node="review"),
        call("read_page", {"page": 1}, "page one text", node="review"),
        call("search_clauses", {"q": "indemnity\tcap"}, "[]", node="review"),
    ]
    dets = run(seq, Config(disabled_signals=frozenset({"repeat", "frequency", "barren", "same_answer"})))
    # The first read admitted new evidence; from then on the phrasings are one action.
    assert brief(dets) == [(7, "signature_repeat", 1)]


def test_003_stalled_measure_warns_even_when_evidence_grows() -> None:
    seq = []
    for v in ("v2", "v3", "v4"):
        seq.append(call("verify_totals", {"ledger": "L-7"}, as_json({"mismatch": 4102.5, "checked": v}),
                        node="verify_totals", measure=4102.5))
        seq.append(call("fetch_statement", {"version": v}, f"statement {v}", node="gather"))
    dets = run(seq)
    assert [d.reason for d in dets] == [Reason.STALLED_MEASURE]
    assert dets[0].figures["visits"] == 3


def test_003_improving_measure_is_progress() -> None:
    seq = [call("verify_totals", {"ledger": "L-7"}, f"mismatch {m}", node="verify_totals", measure=m)
           for m in (4102.5, 3000.0, 1200.0, 0.0)]
    assert run(seq) == []


def _lap_trace(laps: int) -> list[tuple[str, object]]:
    """The planner/extractor lap: each extraction is a fresh sub-agent invocation; the
    planner's obligations and evidence ids change every lap; the shared results do not."""
    events: list[tuple[str, object]] = []
    t = 0
    for lap in range(laps):
        sub = f"extractor-{lap}"
        for name, args, result in (
            ("ocr_pages", {"pages": [3, 4]}, "scanned text of pages 3-4"),
            ("extract_clauses", {"doc": "contract-9"}, as_json({"clauses": [], "note": "re-OCR pages 3-4"})),
        ):
            t += 1
            events.append(("call", ToolCall(name=name, arguments=args, result=result, start_ns=t * S,
                                            end_ns=t * S + S // 2, trace_id="T", span_id=f"{sub}-{name}",
                                            run_id=sub, agent="extractor-2", parent_id=sub)))
        events.append(("end", sub))
        t += 1
        reocr = {"pages": [3, 4], "obligation_id": f"ob-{lap}"}
        events.append(("call", ToolCall(name="dispatch_reocr", arguments=reocr,
                                        result=as_json({"status": "done"}), start_ns=t * S, end_ns=t * S + S // 2,
                                        trace_id="T", span_id=f"planner-{lap}", run_id="planner",
                                        agent="planner-1", parent_id="planner", node="extract_clauses",
                                        evidence=tuple(f"ev-{i}" for i in range(lap + 1)),
                                        obligations=(f"ob-{lap}",))))
    return events


def test_003_livelock_across_agents_is_caught_at_run_scope() -> None:
    engine = ProgressEngine(Config())
    dets = []
    for kind, item in _lap_trace(4):
        if kind == "call":
            dets += engine.observe(item, flush=True)  # type: ignore[arg-type]
            engine.record_tokens("T", item.run_id, 4000)  # type: ignore[union-attr]
        else:
            summary = engine.end_run("T", item, span_id=item, parent_run_id="planner")  # type: ignore[arg-type]
            assert summary is not None
            dets += summary.detections_list
    agent_scope = [d for d in dets if d.scope is Scope.AGENT]
    run_scope = [d for d in dets if d.scope is Scope.RUN]
    assert agent_scope == [], brief(agent_scope)  # no single agent repeats anything
    assert len(run_scope) >= 1
    first = run_scope[0]
    assert first.reason is Reason.SIGNATURE_REPEAT and first.event == "livelock"
    # The first lap admitted the shared results; laps 2-4 leave them unchanged.
    assert first.span_id == "extractor-3"
    assert first.figures["visits"] == 3 and first.figures["tokens_burned"] > 0


def test_003_sub_agents_that_each_bring_new_results_are_healthy() -> None:
    engine = ProgressEngine(Config())
    dets = []
    for lap in range(5):
        sub = f"x{lap}"
        c = ToolCall(name="read_doc", arguments={"doc": lap}, result=f"content {lap}", start_ns=lap * S,
                     end_ns=lap * S + 1, trace_id="T", span_id=f"s{lap}", run_id=sub)
        dets += engine.observe(c, flush=True)
        summary = engine.end_run("T", sub, span_id=sub, parent_run_id="planner")
        assert summary is not None
        dets += summary.detections_list
    assert dets == []


def test_003_widening_query_cheat_is_the_documented_limitation() -> None:
    # Each widened query returns a different near-empty result: the delta is non-empty,
    # so no signature repeats. The barren counter does not see it either (new results).
    seq = [call("search_clauses", {"q": q}, f"{i + 1} weak match(es)") for i, q in
           enumerate(["indemnity cap", "indemnity cap OR ceiling", "indemnity cap OR ceiling OR maximum"])]
    assert run(seq) == []


# --- seed 004: the watchdog -----------------------------------------------------------

def _watchdog_log() -> list[dict]:
    fail = "1 failed (test_export_handles_empty_rows)"
    return [
        call("run_tests", {"cmd": "pytest"}, fail),
        call("edit_file", {"path": "exporter.py", "patch": "changed null check"}, "ok"),
        call("run_tests", {"cmd": "pytest"}, fail),
        call("edit_file", {"path": "exporter.py", "patch": "reverted null check, changed default arg"}, "ok"),
        call("run_tests", {"cmd": "pytest"}, fail),
        call("edit_file", {"path": "exporter.py", "patch": "changed null check"}, "ok"),
        call("run_tests", {"cmd": "pytest"}, fail),
    ]


def test_004_oscillating_fix_is_caught() -> None:
    dets = run(_watchdog_log())
    assert dets, "the oscillation in the watchdog log must be caught"
    assert dets[0].turn <= 7


def test_004_same_failure_with_varying_ids_is_one_decision() -> None:
    # Only the id changes: the normalised action is the same and nothing new comes back.
    seq = [call("fetch_user", {"id": 1000 + i}, None, error=True, error_type="HTTPError",
                error_message=f"404 Not Found: /users/{1000 + i}") for i in range(6)]
    assert brief(run(seq))[:1] == [(3, "signature_repeat", 1)]


def test_004_same_failure_with_varying_commands_recurs() -> None:
    seq = [call("exec", {"command": f"python -c \"open('/data/in.csv').read()[:{10 * (i + 1)}]\""}, None,
                error=True, error_type="FileNotFoundError",
                error_message="[Errno 2] No such file or directory: '/data/in.csv'") for i in range(6)]
    dets = run(seq)
    assert brief(dets) == [(5, "error_recurrence", 1)]
    assert len(dets[0].figures["error_signature"]) == 16


def test_004_errors_are_detected_with_content_capture_off() -> None:
    engine = ProgressEngine(Config())
    dets = []
    for i in range(5):
        dets += engine.observe(ToolCall(name="git_remote", error=True, error_type="CalledProcessError",
                                        error_message="exit status 128", trace_id="t", span_id=f"s{i}",
                                        start_ns=i * S, end_ns=i * S + 1), flush=True)
    assert brief(dets) == [(5, "error_recurrence", 1)]


def test_004_ladder_nudge_restart_park_then_silence() -> None:
    seq = [call("read_file", {"path": "project_management.md"}, "same content")] * 12
    dets = run(seq)
    assert [d.level for d in dets] == [Level.NUDGE, Level.RESTART, Level.PARK]
    assert [d.turn for d in dets] == [2, 4, 6]


def test_004_nudge_asks_for_a_falsifiable_hypothesis_and_gives_no_fix_advice() -> None:
    dets = run(_watchdog_log())
    nudge = dets[0].nudge
    assert "what would prove" in nudge or "prove that belief wrong" in nudge
    assert "null check" not in nudge and "exporter.py" not in nudge  # no raw content
    for word in ("try ", "fix ", "should change"):
        assert word not in nudge.lower()


def test_004_handoff_note_lists_what_was_tried_without_raw_values() -> None:
    dets = run(_watchdog_log())
    note = dets[0].handoff
    assert "What was tried" in note
    assert "edit_file(patch, path)" in note and "run_tests(cmd)" in note
    assert "null check" not in note and "pytest" not in note


def test_004_the_restart_level_names_the_earlier_notice() -> None:
    seq = [call("read_file", {"path": "a"}, "same")] * 4
    dets = run(seq)
    assert dets[1].level is Level.RESTART and "turn 2" in dets[1].nudge
