"""Evidence levels: what the engine may conclude from calls whose result is only a size or a
truncated preview (``arguments``), or whose content is not trusted at all (``names``).

Coding agents' log events (Claude Code's ``tool_result_size_bytes``, Qwen Code's and Gemini
CLI's ``content_length``, Codex's truncated ``output`` preview) carry such results; equal
sizes or equal previews must never be read as equal results."""

from __future__ import annotations

from otel_progress import Config

from .helpers import brief, call, run

BASH = "Bash"


def _args_call(command: str, size: str, **fields: object) -> dict[str, object]:
    return call(BASH, {"command": command}, size, evidence_level="arguments", **fields)


def test_full_level_identical_calls_repeat_at_turn_two_without_an_evidence_level() -> None:
    dets = run([call(BASH, {"command": "grep -r foo ."}, "src/a.py: foo") for _ in range(3)])
    assert brief(dets)[0][:2] == (3, "repeat_cycle")  # a command re-issued once is a re-check
    assert "progress.evidence_level" not in dets[0].event_attributes()


def test_arguments_level_same_request_same_size_fires_frequency_only_with_its_level() -> None:
    dets = run([_args_call("grep -r foo .", "<13 bytes>") for _ in range(6)])
    # never a cycle after two laps, never barren or a livelock from equal sizes: only the
    # identical request sent frequency_count (4) times, marked with its evidence level
    assert [(t, r) for t, r, _ in brief(dets)] == [(4, "frequency")]
    attrs = dets[0].event_attributes()
    assert attrs["progress.evidence_level"] == "arguments"
    assert attrs["progress.count"] == 4
    assert "identical request" in dets[0].nudge


def test_arguments_level_differing_previews_are_new_results() -> None:
    # the same request, but each truncated preview differs: each proves something new
    seq = [_args_call("npm test", f"<{100 + i} bytes>") for i in range(8)]
    assert run(seq) == []


def test_arguments_level_equal_sizes_of_different_requests_are_not_barren() -> None:
    # Full content: different reads that all return an already-seen result are barren.
    full = [call("Read", {"path": f"f{i}.py"}, "x = 1") for i in range(6)]
    assert "barren" in {r for _, r, _ in brief(run(full))}
    # The same sizes prove nothing: no detection at all.
    partial = [call("Read", {"path": f"f{i}.py"}, "<5 bytes>", evidence_level="arguments") for i in range(6)]
    assert run(partial) == []


def test_truncated_preview_at_full_level_is_never_proof_of_identity() -> None:
    preview = "PASS 10 tests ... [truncated]"
    seq = [call(BASH, {"command": "pytest"}, preview, result_truncated=True) for _ in range(3)]
    assert run(seq) == []  # full content would say repeat_cycle at turn 2
    seq = [call(BASH, {"command": "pytest"}, preview, result_truncated=True) for _ in range(4)]
    dets = run(seq)
    assert [(t, r) for t, r, _ in brief(dets)] == [(4, "frequency")]
    assert dets[0].event_attributes()["progress.evidence_level"] == "arguments"


def test_names_level_ignores_arguments_and_results() -> None:
    seq = [call(BASH, {"command": "ls"}, "a.txt", evidence_level="names") for _ in range(10)]
    assert run(seq) == []


def test_names_level_error_recurrence_still_fires_and_is_marked() -> None:
    seq = [call(BASH, {"command": f"make t{i}"}, None, error=True, error_type="ShellError",
                error_message="Shell command failed", evidence_level="names") for i in range(6)]
    dets = run(seq, Config())
    assert [(t, r) for t, r, _ in brief(dets)] == [(5, "error_recurrence")]
    attrs = dets[0].event_attributes()
    assert attrs["progress.evidence_level"] == "names"
    # the identical-request variant needs arguments: names alone are never compared
    assert "progress.identical_requests" not in attrs


def test_arguments_level_identical_failing_request_fires_on_the_third() -> None:
    seq = [call("Edit", {"file_path": "a.py", "old_string": "x"}, None, error=True, error_type="ToolError",
                error_message="String to replace not found in file.", evidence_level="arguments")
           for _ in range(3)]
    dets = run(seq)
    assert [(t, r) for t, r, _ in brief(dets)] == [(3, "error_recurrence")]
    attrs = dets[0].event_attributes()
    assert attrs["progress.identical_requests"] == 3
    assert attrs["progress.evidence_level"] == "arguments"


def test_arguments_level_rerun_after_each_new_edit_with_equal_sizes_is_not_claimed() -> None:
    # edit (a new request each time, an acknowledgement of equal size), then the same test
    # run with an equal size: the edit may have changed the output; nothing proves a loop
    seq = []
    for i in range(6):
        seq.append(call("Edit", {"file_path": "a.py", "old_string": f"v{i}", "new_string": f"v{i + 1}"},
                        "<30 bytes>", evidence_level="arguments"))
        seq.append(_args_call("pytest -q", "<40 bytes>"))
    assert run(seq) == []
    # the same edit sent again each time is not a new request: the loop is claimed
    same = []
    for _ in range(6):
        same.append(call("Edit", {"file_path": "a.py", "old_string": "v0", "new_string": "v1"},
                         "<30 bytes>", evidence_level="arguments"))
        same.append(_args_call("pytest -q", "<40 bytes>"))
    assert [r for _, r, _ in brief(run(same))] == ["frequency"]


def test_arguments_level_alternating_known_requests_still_count() -> None:
    seq = [_args_call(c, s) for _ in range(5) for c, s in (("cat notes.txt", "<30 bytes>"), ("ls", "<9 bytes>"))]
    assert [(t, r) for t, r, _ in brief(run(seq))] == [(8, "frequency")]  # ls: turns 2, 4, 6, 8
