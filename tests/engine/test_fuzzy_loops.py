"""Issue 15: loops whose repetition is not byte-exact, as small labelled scenarios of our own.

Each pattern is written out both ways: the loop (caught, at the turn stated) and its
healthy twin (silent): the same place answered by a re-worded page, and a page that really
changed; the same strategy through other requests, and hub-and-spoke browsing; a streak
broken by an answer that only looks new, and one broken by a real answer; opaque tokens
in plain text, and a new commit; argument-free navigation; generic failure messages;
timeouts without an answer.
"""

from __future__ import annotations

from otel_progress import Config
from otel_progress.evidence.generic import bare_acknowledgement, uninformative_failure
from otel_progress.evidence.location import location_of, normalise_url
from otel_progress.evidence.opaque import is_opaque, mask_opaque
from otel_progress.evidence.views import Sketch, Views, only_repeats

from .helpers import brief, call, run

# -- pages as a browser agent's transcriber shows them -------------------------------------------

HEAD = ("Here is a screenshot of [{title}]({url}). The viewport shows 30% of the webpage,"
        " and is positioned {where}.\n")
TOP = "at the top of the page"

ISSUES = [
    "Issues · acme/widget\nOpen 12 Closed 340\nSearch all issues",
    "- Crash on empty config #4521 opened 7 minutes ago by kowalski\n- Slow start on Windows #4519 opened"
    " 2 hours ago by mbrandt\n- Docs: typo in the install guide #4517 opened yesterday by lchen",
]
REWORDED = [
    # the same page transcribed again: bullets laid out anew, a name misread, time moved on
    "Sure, here is the text of the page:\n**Header:**\nIssues - acme/widget\nOpen 12 Closed 340\n"
    "Search all issues\n**List:**\n1. Crash on empty config #4521 opened 9 minutes ago by kowalsky\n"
    "2. Slow start on Windows #4519 opened 2 hours ago by mbrandt\n3. Docs: typo in the install guide"
    " #4517 opened yesterday by lchen",
    "Issues / acme/widget. Open 12, Closed 340. Search all issues.\n"
    "Crash on empty config (#4521), opened 11 minutes ago by kovalski\nSlow start on Windows (#4519),"
    " opened 2 hours ago by mbrandt\nDocs: typo in the install guide (#4517), opened yesterday by lchen",
    "Top Bar:\nIssues · acme/widget\nOpen 12 Closed 340\nSearch all issues\nCrash on empty config #4521"
    " · 12 minutes ago · kowalski\nSlow start on Windows #4519 · 2 hours ago · mbrandt\nDocs: typo in"
    " the install guide #4517 · yesterday · lchen",
]
ISSUES_URL = "https://tracker.example.org/acme/widget/issues?utm_source=chat&sid=8f3e9a1b2c3d4e5f6a7b"


def view(text: str, url: str = ISSUES_URL, title: str = "Issues · acme/widget", where: str = TOP) -> str:
    return HEAD.format(title=title, url=url, where=where) + text


def click(target: str, text: str, **kw) -> dict:
    return call("browser.click", {"target": target}, view(text, **kw))


# -- 1. the same place, a noisy answer ---------------------------------------------------------------

def test_the_same_click_answered_by_a_reworded_page_is_a_repeat() -> None:
    seq = [call("browser.open", {"url": ISSUES_URL}, view("\n".join(ISSUES))),
           *[click("Filter: bug", text) for text in REWORDED]]
    # the first click found the page as it was (no visible effect): the second is a routine
    # retry; the third identical click on the unchanged page is the loop (seed 002, issue 25)
    assert brief(run(seq))[:1] == [(4, "repeat_cycle", 1)]


def test_the_same_click_on_a_page_that_really_changed_is_progress() -> None:
    # a panel opened, a log gained lines, a new issue arrived: new lines of content each time
    changed = [
        REWORDED[0] + "\nCrash on empty config #4521\nSteps to reproduce: run widget with an empty"
        " config file\nExpected a default configuration, got a segmentation fault in parser",
        REWORDED[1] + "\nNew issue: Memory leak in the scheduler when tasks are cancelled #4523 by okafor",
        REWORDED[2] + "\nBuild log: compiling scheduler module, linking runtime library, running"
        " integration suite",
    ]
    seq = [call("browser.open", {"url": ISSUES_URL}, view("\n".join(ISSUES))),
           *[click("Filter: bug", text) for text in changed]]
    assert run(seq) == []


def test_figures_that_moved_are_news_in_a_poll_only() -> None:
    place = Views()
    loc = location_of(None, view("x"))
    assert loc is not None and loc.view
    first = view("Dashboard of the nightly export\nRows processed: 1200 of 3000 (40%)\nWorkers busy: three")
    later = view("Dashboard of the nightly export\nRows processed: 1450 of 3000 (48%)\nWorkers busy: three")
    place.observe(loc, request=1, parsed=first, digest=11)
    # polled again by the identical request: the figures moved, that is progress (seed 000)
    assert place.observe(loc, request=1, parsed=later, digest=12)[0] == 12
    # reached by another request, a ticking counter on a page seen before is not news
    assert place.observe(loc, request=2, parsed=first.replace("1200", "1510").replace("40%", "50%"),
                         digest=13)[0] == 12
    # a single figure read differently in a line (a badge, a misread digit) is within a
    # transcription's noise even in a poll; a result that is not a view is compared exactly
    assert place.observe(loc, request=2, parsed=later.replace("three", "three 3"), digest=14)[0] == 12


def test_only_answers_at_one_location_are_compared() -> None:
    # two different pages that look alike (one site's chrome, similar lists) are two pages
    other = ISSUES_URL.replace("/issues", "/pulls")
    seq = [call("browser.open", {"url": ISSUES_URL}, view("\n".join(ISSUES))),
           *[click("Filter: bug", text, url=other if i % 2 else ISSUES_URL) for i, text in enumerate(REWORDED)]]
    assert [r for _, r, _ in brief(run(seq))] == []


def test_a_command_output_is_never_a_view() -> None:
    # the same command, its output naming a URL at its head: compared byte for byte
    out = "URL: https://ci.example.org/job/42\nstatus: running tests, {n} of 300 done"
    seq = [call("bash", {"command": "ci status 42"}, out.format(n=n)) for n in (40, 80, 120, 160, 200)]
    assert run(seq) == []


# -- 2. the same strategy, other requests --------------------------------------------------------------

def page(name: str, n: int) -> str:
    body = f"{name} handbook, chapter {name}\nThe {name} section explains the {name} settings in detail"
    return view(body + (" (again)" if n else ""), url=f"https://docs.example.org/{name}", title=name)


def test_a_path_replayed_through_other_requests_is_caught_by_its_third_revisit() -> None:
    seq = [call("search", {"q": "widget setup guide"}, page("search", 0)),
           call("browser.click", {"target": "Setup guide"}, page("setup", 0)),
           call("browser.click", {"target": "Configuration"}, page("config", 0)),
           # the same three places again, reached by a reworded search and other links
           call("search", {"q": "guide setup widget"}, page("search", 1)),
           call("browser.click", {"target": "Guide: setup"}, page("setup", 1)),
           call("browser.click", {"target": "Config options"}, page("config", 1))]
    assert brief(run(seq))[:1] == [(6, "state_revisit", 1)]


def test_going_back_to_a_hub_between_new_pages_is_exploration() -> None:
    # (a fourth identical back to the unchanged hub within thirty calls would be seed 004's
    # frequency signal: the same call with the same result four times)
    seq = [call("search", {"q": "widget plugins"}, page("results", 0))]
    for i, name in enumerate(["alpha", "beta", "gamma"]):
        seq += [call("browser.click", {"target": name}, page(name, 0)),
                call("browser.back", {}, page("results", i % 2))]
    seq += [call("search", {"q": "widget plugin reviews"}, page("reviews", 0)),
            call("browser.click", {"target": "delta"}, page("delta", 0))]
    assert run(seq) == []


def test_a_reworded_search_is_the_same_place() -> None:
    a = location_of(None, view("x", url="https://search.example.com/search?q=refund+policy+annual&form=QBLH"))
    b = location_of(None, view("x", url="https://www.search.example.com/search/?form=QBLH&q=annual%20refund"
                                       "%20policy&cvid=E9B3A9846D0F4C87BFCD1BB5EB43B6FE"))
    c = location_of(None, view("x", url="https://search.example.com/search?q=refund+policy+monthly&form=QBLH"))
    assert a == b and a != c


def test_positions_within_half_a_viewport_are_one_position() -> None:
    def at(where: str) -> str:
        return "The viewport shows 10% of the webpage, and is positioned " + where + ".\n"

    url = "[Doc](https://example.org/doc)"
    here = [location_of(None, "Here is a screenshot of " + url + ". " + at(w)) for w in
            ("8% down from the top of the page", "9% down from the top of the page", TOP,
             "30% down from the top of the page", "at the bottom of the page")]
    assert here[0] == here[1] and here[0] != here[2] != here[3] != here[4]


# -- 3. a streak broken by one answer that only looks new ---------------------------------------------

def lookup(word: str, result: str) -> dict:
    return call("lookup", {"keyword": word}, result)


ARTICLE = ("Arun Date (4 May 1934 - 6 May 2018) was a well known Marathi singer of Bhavageete, a genre"
           " of expressionist poetry and music.")


def test_a_streak_is_not_broken_by_an_answer_that_repeats_what_the_run_read() -> None:
    seq = [call("search", {"entity": "Arun Date"}, ARTICLE), lookup("famous", "No Results"),
           lookup("Bhavageete", "(Result 1/1) " + ARTICLE), lookup("songs", "No Results"),
           lookup("lyrics", "No Results"), lookup("albums", "No Results")]
    assert brief(run(seq))[:1] == [(6, "barren", 1)]


def test_a_streak_broken_by_a_real_answer_starts_again() -> None:
    seq = [call("search", {"entity": "Arun Date"}, ARTICLE), lookup("famous", "No Results"),
           lookup("Shukratara", "(Result 1/1) His best known song, Shukratara, was composed by Shrinivas"
                                " Khale in 1962 and recorded with Sudha Malhotra for All India Radio."),
           lookup("songs", "No Results"), lookup("lyrics", "No Results"), lookup("albums", "No Results")]
    assert run(seq) == []


def test_only_repeats_needs_prose_and_a_line_of_news_breaks_it() -> None:
    earlier = [Sketch(ARTICLE), Sketch("file0.txt")]
    assert only_repeats(Sketch("(Result 1/1) " + ARTICLE), earlier)
    assert not only_repeats(Sketch("file1.txt"), earlier)  # a short answer is a fact
    assert not only_repeats(Sketch(ARTICLE + "\nHis best known song, Shukratara, was recorded in 1962."), earlier)


# -- 4. opaque tokens inside plain text -------------------------------------------------------------------

def test_a_text_that_differs_only_in_opaque_tokens_is_a_repeat() -> None:
    traces = ("4bf92f3577b34da6a3ce929d0e0e4736", "9a1c27f3e0b44d2f8a6b5c4d3e2f1a0b",
              "c0ffee1234567890abcdef1234567890")
    answers = [f"Fetched 12 invoices for account acme (trace {t}, took 0.4 s)" for t in traces]
    seq = [call("fetch_invoices", {"account": "acme"}, a) for a in answers]
    assert brief(run(seq))[:1] == [(2, "repeat_cycle", 1)]


def test_a_new_commit_stays_new() -> None:
    seq = [call("git", {"args": "log -1 --oneline"}, "3f2a1bc9 fix parser on empty config"),
           call("edit", {"file": "parser.py", "patch": "handle None"}, "ok"),
           call("git", {"args": "log -1 --oneline"}, "8e7d6c5b handle None in parser"),
           call("edit", {"file": "parser.py", "patch": "add test"}, "ok"),
           call("git", {"args": "log -1 --oneline"}, "1a2b3c4d add a test for the empty config")]
    assert run(seq) == []


def test_opaque_tokens() -> None:
    assert is_opaque("E9B3A9846D0F4C87BFCD1BB5EB43B6FE") and is_opaque("123e4567-e89b-12d3-a456-426614174000")
    assert not is_opaque("QBLH") and not is_opaque("2024-05-01") and not is_opaque("sophia_silva_7557")
    assert mask_opaque("Request 7f3a9c21e0b4: ok, rid E171:FA573:405053D:50CAA42") == "Request <id>: ok, rid <id>"
    assert mask_opaque("version 1.2.3, port 8080, issue #22669") == "version 1.2.3, port 8080, issue #22669"
    assert normalise_url("https://Example.org/a/?utm_source=x&gclid=1&id=42&s=E9B3A9846D0F4C87BF#") == (
        "https://example.org/a?id=42")
    # a search query is words, never an opaque token, however its capitals fall: two searches
    # are two locations (the same words in another order are one)
    assert not is_opaque("Elizabeth movie availability on Netflix US")
    first = normalise_url("https://www.bing.com/search?q=Elizabeth+movie+availability+on+Netflix+US")
    assert first == normalise_url("https://bing.com/search?q=Netflix%20US%20Elizabeth%20movie%20availability")
    assert first != normalise_url("https://www.bing.com/search?q=Elizabeth+movie+availability+on+Hulu")


# -- 5. argument-free navigation answered by a bare acknowledgement ------------------------------------

def test_argument_free_navigation_acknowledged_is_a_move_each_time() -> None:
    seq = [call("browser_click", {"index": 3}, "Clicked element 3"), call("browser_go_back", {}, "Navigated back"),
           call("browser_go_back", {}, "Navigated back"), call("browser_click", {"index": 5}, "Clicked element 5"),
           call("browser_go_back", {}, "Navigated back"), call("browser_scroll", {}, "Scrolled down"),
           call("browser_scroll", {}, "Scrolled down"), call("browser_scroll", {}, "Scrolled down")]
    assert run(seq) == []


def test_argument_free_navigation_that_names_where_it_went_is_judged_there() -> None:
    # back and forth between two pages that never change: the answers say so
    a = view("Settings page of the widget\nTheme: dark\nLanguage: English", url="https://app.example.org/settings")
    b = view("Profile page of the widget user\nName: Kim\nEmail hidden", url="https://app.example.org/profile")
    seq = [call("browser_go_back", {}, a if i % 2 else b) for i in range(6)]
    assert brief(run(seq))[:1] == [(4, "repeat_cycle", 1)]


def test_a_negative_answer_to_an_argument_free_request_still_repeats() -> None:
    seq = [call("next_page", {}, "No more pages")] * 4
    assert brief(run(seq))[:1] == [(2, "repeat_cycle", 1)]


def test_bare_acknowledgements() -> None:
    assert bare_acknowledgement("Navigated back") and bare_acknowledgement("Scrolled down.")
    assert not bare_acknowledgement("No more pages") and not bare_acknowledgement("Page 3 of 7")
    assert not bare_acknowledgement("Cannot go back") and not bare_acknowledgement("Opened /tmp/a.txt")


# -- 6. generic failure messages --------------------------------------------------------------------------

def failing(tool: str, command: str, message: str, kind: str = "ShellError") -> dict:
    return call(tool, {"command": command}, None, error=True, error_type=kind, error_message=message)


def test_unrelated_commands_failing_with_a_generic_message_do_not_add_up() -> None:
    for tool, message, kind in (("Bash", "Shell command failed", "ShellError"),
                                ("run_shell_command", "Tool execution failed", "ToolError")):
        seq = [failing(tool, f"make target{i}", message, kind) for i in range(8)]
        assert run(seq) == [], message


def test_the_same_command_failing_with_a_generic_message_is_a_repeated_failure() -> None:
    seq = [failing("Bash", "make test", "Shell command failed"),
           call("Read", {"file_path": "Makefile"}, "test:\n\tpytest -x"),
           failing("Bash", "make test", "Shell command failed"),
           failing("Bash", "make test", "Shell command failed")]
    assert brief(run(seq))[:1] == [(4, "error_recurrence", 1)]


def test_an_informative_message_is_still_one_failure_across_requests() -> None:
    seq = [failing("exec", f"python read.py --head {i}", "FileNotFoundError: /data/x.csv", "ExecError")
           for i in range(6)]
    assert brief(run(seq))[:1] == [(5, "error_recurrence", 1)]


def test_uninformative_failures() -> None:
    assert uninformative_failure("Shell command failed", "ShellError", "Bash")
    assert uninformative_failure("Tool execution failed", "ToolError", "run_shell_command")
    assert uninformative_failure("no reply from the delegate (timed out)", "timeout", "WebSurfer")
    assert uninformative_failure("Command failed with exit code 1", None, "bash") and uninformative_failure("")
    assert not uninformative_failure("Tool exec not found", "ToolNotFound", "exec")
    assert not uninformative_failure("Error: payment amount does not add up", "tool_error", "book")
    assert not uninformative_failure("503 Service Unavailable", "HTTPError", "fetch")


# -- 7. timeouts without an answer ----------------------------------------------------------------------------

def delegate(instruction: str, ok: str | None = None) -> dict:
    if ok is not None:
        return call("WebSurfer", {"instruction": instruction}, ok)
    return call("WebSurfer", {"instruction": instruction}, "no reply from the delegate (timed out)", error=True,
                error_type="timeout", error_message="no reply from the delegate (timed out)")


def test_the_same_request_timing_out_again_is_a_repeated_failure() -> None:
    seq = [delegate("open the stock history page"), call("think", {"thought": "retry"}, ""),
           delegate("open the stock history page"), delegate("open the stock history page")]
    assert brief(run(seq))[:1] == [(4, "error_recurrence", 1)]


def test_timeouts_of_different_requests_are_not_one_failure_but_bring_nothing() -> None:
    # no error recurrence (each request its own failure), but nothing came back four times
    seq = [delegate(f"check shop {name} for salads") for name in ("north", "south", "east", "west")]
    assert brief(run(seq)) == [(4, "barren", 1)]
    healthy = [delegate("check shop north for salads"), delegate("check shop north for salads", "3 salads under $15")]
    assert run(healthy) == []


def test_configuration_keys() -> None:
    config = Config.from_mapping({"location_revisit_threshold": 2, "disabled_signals": ["location"]})
    assert config.location_revisit_threshold == 2 and not config.enabled("location")
