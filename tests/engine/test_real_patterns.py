"""Issue 11: the patterns of real agent runs, as small labelled scenarios of our own.

Each test is one pattern seen in real runs of others' agents (a shell agent, a
tool-calling agent, a terminal agent), written out by hand: the healthy shape must stay
silent, the stuck shape must be caught, at the turn stated.
"""

from __future__ import annotations

import json

from otel_progress import Config
from otel_progress.evidence.canonical import error_signature_text
from otel_progress.evidence.content import command_of, is_deliberate_wait, is_empty, same_prose, says_nothing_found

from .helpers import brief, call, run


def sh(command: str, result: str = "", **fields) -> dict:
    return call("bash", {"command": command}, result, **fields)


def sh_fail(command: str, message: str, kind: str = "nonzero_exit") -> dict:
    return call("bash", {"command": command}, message, error=True, error_type=kind, error_message=message)


# -- 1. silent success is not "nothing new" ---------------------------------------------------

def test_silent_new_commands_are_progress() -> None:
    # healthy: set-up commands that print nothing because they did something
    seq = [sh("ls -la", "total 0"),
           sh("mkdir -p /app/ssl"), sh("openssl genrsa -out /app/ssl/server.key 2048"),
           sh("openssl req -new -x509 -key /app/ssl/server.key -out /app/ssl/server.crt -subj /CN=x"),
           sh("cat /app/ssl/server.key /app/ssl/server.crt > /app/ssl/server.pem"),
           sh("chmod 600 /app/ssl/server.pem"), sh("tmux new-session -d -s work"),
           sh("tmux split-window -h -t work"), sh("tmux send-keys -t work:0.1 'vim a.py' Enter"),
           sh("tmux send-keys -t work:0.1 ':wq' Enter")]
    assert run(seq) == []


def test_the_same_silent_command_again_is_not_progress() -> None:
    seq = [sh("ls", "a.py"), *[sh("tmux send-keys -t work:0.1 Enter")] * 6]
    dets = run(seq)
    assert dets and dets[0].turn <= 6


def test_a_command_is_recognised_by_its_arguments_not_its_name() -> None:
    assert command_of({"keystrokes": "ls -la\n"}) == "ls -la\n"
    assert command_of({"cmd": ["git", "status"]}) == "git\nstatus"
    assert command_of({"query": "tmux"}) is None  # a search, whatever the tool is called
    # a terminal tool named anything: its new silent keystrokes are progress
    seq = [call("send_keys", {"keystrokes": f"echo step{i} > f{i}\n"}, "") for i in range(8)]
    assert run(seq) == []
    # a search tool named "bash" is still a search: new queries answered "0 results" are barren
    seq = [call("bash", {"query": q}, "0 results") for q in ("a", "a b", "b a", "a b c", "c")]
    assert brief(run(seq))[:1] == [(4, "barren", 1)]


def test_nothing_found_is_evidence_of_nothing_even_from_a_command() -> None:
    assert says_nothing_found("Could not find 'refund_policy'. Similar: refund_rules, policies")
    assert says_nothing_found("No results for 'annual plan refund'")
    assert says_nothing_found("Skill 'pdf-tools' not found. Available skills: docx, xlsx, ffmpeg")
    assert says_nothing_found("Error: /data/in.csv does not exist")
    assert not says_nothing_found("Found 3 results: a, b, c")
    assert not says_nothing_found("Loaded skill: docx. Sections not found in the template are skipped.")
    assert is_empty("No matching documents.") and is_empty("")
    seq = [call("lookup", {"name": n}, f"Could not find '{n}'. Similar: {n}_v2, {n}s")
           for n in ("refund", "refunds", "refund_policy", "annual_refund", "policy")]
    assert brief(run(seq))[:1] == [(4, "barren", 1)]
    seq = [sh(f"grep -rl '{w}' docs || echo 'No matches found'", "No matches found")
           for w in ("refund", "refunds", "annual", "policy", "plan")]
    assert brief(run(seq))[:1] == [(4, "barren", 1)]


# -- 2. work started in the background, then a wait -------------------------------------------

def test_a_deliberate_wait_on_a_background_job_is_a_poll() -> None:
    assert is_deliberate_wait("sleep 5 && cat /tmp/eval.log")
    assert not is_deliberate_wait("python sleepy.py")
    seq = [sh("nohup python evaluate.py > /tmp/eval.log 2>&1 &"),
           *[sh("sleep 10 && cat /tmp/eval.log")] * 6,
           sh("sleep 10 && cat /tmp/eval.log", "accuracy: 0.91")]
    assert run(seq, gap=12) == []


def test_a_log_that_grows_is_new() -> None:
    lines = [f"epoch {i} loss {1 / (i + 1):.3f}" for i in range(8)]
    seq = [sh("nohup python train.py > train.log 2>&1 &")]
    seq += [sh("tail -n 3 train.log", "\n".join(lines[max(0, i - 2): i + 1])) for i in range(8)]
    assert run(seq) == []


def test_a_deliberate_wait_past_the_budget_is_a_timeout() -> None:
    seq = [sh("nohup ./serve.sh &"), *[sh("sleep 60 && cat serve.log")] * 40]
    dets = run(seq, gap=61, config=Config(implicit_max_wait_seconds=600))
    assert dets and dets[0].reason.value == "wait_timeout"


# -- 3. edit, then re-run ---------------------------------------------------------------------

def test_rewrite_rerun_with_a_new_check_result_is_progress() -> None:
    seq = [sh("cat maze.txt", "#S #\n#E##")]
    for i in range(5):
        seq += [sh(f"cat <<'EOF' > explore.py\n# version {i}\nEOF"),
                sh("python explore.py 1", "Maze 1 saved to output/1.txt"),
                sh("cat output/1.txt", f"#S{'.' * i}#\n#E##")]
    assert run(seq) == []


def test_the_same_wrong_output_after_three_rewrites_is_not_progress() -> None:
    seq = [sh("python test.py", "FAIL: expected 6, got 5")]
    for i in range(4):
        seq += [sh(f"cat <<'EOF' > solve.py\n# attempt {i}\nEOF"), sh("python test.py", "FAIL: expected 6, got 5")]
    dets = run(seq)
    # the third identical output, after the second rewrite: the same answer whatever was asked
    assert dets and (dets[0].turn, dets[0].reason.value) == (5, "same_answer")


def test_the_same_failure_after_three_rewrites_is_caught_by_the_third() -> None:
    seq = []
    for i in range(4):
        seq += [sh(f"cat <<'EOF' > env.yml\n# attempt {i}\nEOF"),
                sh_fail("python -m pyflakes app.py", "app.py:42:5: IndentationError: unexpected indent")]
    assert brief(run(seq))[:1] == [(6, "error_recurrence", 1)]


# -- 4. the same failing request, three times -------------------------------------------------

BOOK = {"user_id": "u_1", "flights": [{"flight_number": "HAT023", "date": "2024-05-26"}],
        "payment_methods": [{"payment_id": "credit_card_1", "amount": 1625}]}
REFUSAL = "Error: payment amount does not add up, total price is 4875, but paid 1625"


def booking(args=BOOK, error=REFUSAL) -> dict:
    return call("book_reservation", json.dumps(args), error, error=True, error_type="tool_error",
                error_message=error)


def think(text: str) -> dict:
    return call("think", {"thought": text}, "")


def test_the_third_identical_failing_request_is_caught_by_its_third_failure() -> None:
    seq = [call("get_user", {"id": "u_1"}, '{"name": "M"}'), booking(), think("the total must be wrong"),
           booking(), think("let me re-check the segments"), booking(), think("still failing"), booking()]
    dets = run(seq)
    assert brief(dets)[:1] == [(6, "error_recurrence", 1)]
    assert dets[0].figures["identical_requests"] == 3


def test_a_retry_that_works_and_a_corrected_request_are_fine() -> None:
    fixed = {**BOOK, "payment_methods": [{"payment_id": "credit_card_1", "amount": 4875}]}
    seq = [booking(), booking(), call("book_reservation", json.dumps(BOOK), '{"reservation_id": "HATHAT"}'),
           booking(), call("calculate", {"expression": "1625 * 3"}, "4875.0"),
           call("book_reservation", json.dumps(fixed), '{"reservation_id": "K1NW8N"}')]
    assert run(seq) == []


def test_identical_failures_without_captured_arguments_are_not_compared_by_name() -> None:
    from otel_progress import NOT_CAPTURED

    seq = [call("book", NOT_CAPTURED, NOT_CAPTURED, error=True, error_type="tool_error", error_message="x")] * 4
    assert run(seq) == []


# -- 5. error signatures: not too coarse, not too fine -----------------------------------------

def test_silent_failures_of_different_commands_do_not_add_up() -> None:
    seq = []
    for i in range(8):
        seq += [sh(f"ls /app/dir{i}", f"file{i}.txt"), sh_fail(f"test -f /app/dir{i}/out{i}", "")]
    assert run(seq) == []


def test_a_killed_command_whose_partial_output_differs_each_lap_is_one_failure() -> None:
    def killed(pct: int, spin: str) -> dict:
        out = (f"The last command <command>conda env create -f environment.yml</command> timed out and has"
               f" been killed.\nThe output of the command was:\n<output>\nCollecting package metadata: done\n"
               f"Solving environment: {spin * (pct // 10)} {pct}%\n</output>\nPlease try another command.")
        return sh_fail("conda env create -f environment.yml", out, "timeout")

    seq = []
    for i, (pct, spin) in enumerate([(12, "|"), (37, "/"), (64, "-"), (81, "\\")]):
        seq += [sh(f"sed -i 's/python=3.{8 + i}/python=3.{9 + i}/' environment.yml"), killed(pct, spin)]
    # (the first lap's failure is told from the second by its text; from the second lap on, the
    # laps are one failure: volatile.Answers keeps no text, so the third such lap fires)
    assert brief(run(seq))[:1] == [(8, "error_recurrence", 1)]


def test_tracebacks_that_end_differently_are_different_failures() -> None:
    head = "Traceback (most recent call last):\n" + '  File "/usr/lib/app.py", line 3, in <module>\n' * 30
    a = error_signature_text("bash", "nonzero_exit", head + "ModuleNotFoundError: No module named 'zmq'")
    b = error_signature_text("bash", "nonzero_exit", head + "ModuleNotFoundError: No module named 'tornado'")
    assert a != b
    seq = []
    for mod in ("zmq", "tornado", "traitlets", "jinja2", "babel"):
        seq += [sh_fail("jupyter notebook --generate-config", head + f"ModuleNotFoundError: No module named '{mod}'"),
                sh(f"pip install {mod}", f"Successfully installed {mod}-1.0")]
    assert run(seq) == []


# -- 6. same request, same page, reworded answer -----------------------------------------------

PAGES = [
    "The page shows the checkout form for order 4411 with a disabled Pay button and the title Checkout.",
    "This is the Checkout page: the checkout form for order 4411 is shown, and its Pay button is disabled.",
    "You are on the Checkout page. It displays the checkout form of order 4411; the Pay button is disabled.",
    "Checkout page: the form for order 4411 is visible and the Pay button appears disabled.",
    "The Checkout page is displayed with the checkout form for order 4411, and Pay is still disabled.",
    "The checkout form of order 4411 is shown on the Checkout page; the Pay button is disabled.",
]


def test_a_reworded_transcription_of_the_same_page_is_not_new() -> None:
    assert same_prose(PAGES[1], PAGES[0])
    assert not same_prose("The page shows order 4412 with an enabled Pay button and the title Checkout.",
                          PAGES[0])  # a new figure is a new fact
    seq = [call("click", {"element": "button#pay"}, page) for page in PAGES]
    # nothing new enters after the first page: the third identical decision with the same
    # evidence is a livelock (seed 003), before the no-progress counter gets to four
    assert brief(run(seq))[:1] == [(4, "signature_repeat", 1)]


def test_a_reworded_page_description_with_the_same_title_and_url_is_not_new() -> None:
    seq = [call("browser_click", {"selector": "#pay"},
                json.dumps({"title": "Checkout", "url": "https://shop.test/checkout", "description": page}))
           for page in PAGES]
    dets = run(seq)
    assert dets and dets[0].turn <= 5
    # the same page with a figure that changed is new each time
    seq = [call("browser_click", {"selector": "#pay"},
                json.dumps({"title": "Checkout", "url": "https://shop.test/checkout",
                            "description": PAGES[0].replace("4411", str(4411 + i))})) for i in range(6)]
    assert run(seq) == []


def test_different_pages_in_similar_words_are_new() -> None:
    seq = [call("click", {"element": f"a#item{i}"}, f"The page shows the product page for item {i} with a"
                f" price of {10 + i} dollars and an Add to cart button.") for i in range(6)]
    assert run(seq) == []


# -- 7. envelope fields that change on every call ------------------------------------------------

def test_fields_new_on_every_call_while_the_rest_repeats_are_learned_volatile() -> None:
    hits = [{"title": "Refund policy", "url": "/docs/refunds"}] * 12
    seq = [call("search_docs", {"q": "refund policy"},
                json.dumps({"query_id": f"q_{7731 + 17 * i:08x}", "hits": hits, "total": 12})) for i in range(8)]
    dets = run(seq)
    assert dets and dets[0].turn <= 6
    # with the field named by the user, from the start
    assert brief(run(seq, Config(volatile_keys=frozenset({"query_id"}))))[0][0] <= 4


def test_an_envelope_one_level_down_is_learned_too() -> None:
    hits = [{"title": "Refund policy", "url": "/docs/refunds"}] * 12
    seq = [call("search_docs", {"q": "refund policy"},
                json.dumps({"ok": True, "result": {"query_id": f"q_{7731 + 17 * i:08x}", "hits": hits}}))
           for i in range(8)]
    dets = run(seq)
    assert dets and dets[0].turn <= 6


def test_a_counter_that_moves_is_not_an_envelope() -> None:
    seq = [call("get_job", {"id": "j_1"}, json.dumps({"job": "j_1", "done_items": 10 * i, "total": 90}))
           for i in range(9)]
    assert run(seq) == []


def test_a_new_request_answered_with_silence_is_neutral() -> None:
    # notes to self between lookups neither count as progress nor as barren steps
    seq = [call("get_order", {"id": "A1"}, '{"status": "shipped"}')]
    for i in range(3):
        seq += [think(f"note {i}: the order shipped"), think(f"note {i}: check the shipment next"),
                call("get_order", {"id": "A1"}, '{"status": "shipped"}')]
    dets = run(seq)
    # only the re-reads are barren: four of them (turns 4, 7, 10) are not reached ...
    assert [d for d in dets if d.reason.value == "barren"] == []
    # ... while the same silent request again is a repeat like any other
    seq = [call("get_order", {"id": "A1"}, '{"status": "shipped"}'), *[think("same note")] * 5]
    assert brief(run(seq))[:1] == [(3, "repeat_cycle", 1)]
    read = call("get_order", {"id": "A1"}, '{"status": "shipped"}')
    seq = [read, *[t for _ in range(3) for t in (think("same note"), read)]]
    assert brief(run(seq))[:1] == [(4, "repeat_cycle", 1)]  # read, note, read, note
