"""The labelled corpus: it loads, it is labelled as the issue requires, and every stuck
run's earliest provable turn is what its documented rule gives."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.quality.corpus import CorpusError, load_corpus, make_run
from bench.quality.rules import RULE_FUNCTIONS, earliest_turn, rule_turn
from otel_progress import Config

RUNS = load_corpus()
STUCK = [r for r in RUNS if r.stuck]
WAIT_RULES = {"wait-budget", "poll-after-terminal"}


def test_size_and_balance() -> None:
    assert len(RUNS) >= 60
    healthy = sum(1 for r in RUNS if not r.stuck)
    assert healthy * 2 >= len(RUNS), "at least half the runs must be healthy"
    assert len(STUCK) >= 25


def test_categories_cover_the_issue() -> None:
    categories = Counter(r.category for r in RUNS)
    wanted = [
        "poll-changing", "poll-unchanging", "retry-after-timeout", "batch-edits", "paging-forward",
        "paging-cyclic", "rephrased-search", "parameter-creep", "edit-revert", "same-failure-varying-args",
        "multi-agent-laps", "parallel", "capture-off",
    ]
    for category in wanted:
        assert categories[category], f"no run of category {category}"
    assert any(not r.capture for r in RUNS if r.stuck) and any(not r.capture for r in RUNS if not r.stuck)
    assert any(r.multi_agent for r in RUNS if r.stuck) and any(r.multi_agent for r in RUNS if not r.stuck)
    assert any(len(s.calls) > 1 for r in RUNS for s in r.steps)


def test_every_run_cites_its_source() -> None:
    for run in RUNS:
        assert any(k in run.source for k in ("seed", "peers.md", "otel.md")), run.id


@pytest.mark.parametrize("run", STUCK, ids=lambda r: r.id)
def test_earliest_turn_is_what_the_rules_give(run) -> None:
    assert earliest_turn(run) == run.earliest_turn
    # No general rule proves the loop earlier than recorded (waits excepted: identical polls
    # prove nothing while the wait is legitimate).
    if not WAIT_RULES & set(run.rules):
        for rule in ("cycle", "nothing-new", "same-failure", "same-request-failure"):
            turn = rule_turn(run, rule)
            assert turn is None or turn >= run.earliest_turn, (rule, turn)
    assert run.earliest_turn < run.turns, "a stuck run goes on past its earliest provable turn"


def test_configs_are_valid_otel_progress_configs() -> None:
    with_config = [r for r in RUNS if r.config]
    assert with_config
    for run in with_config:
        config = Config.from_mapping(run.config, run.id)
        assert config.manifest, run.id


def test_rules_on_the_seed_examples() -> None:
    s = {"call": "search_tickets", "args": {"q": "refund delay"}, "result": "3 tickets: 811, 812, 840"}
    a = {"call": "get_order", "args": {"id": 123}, "result": '{"status": "shipped"}'}
    b = {"call": "get_shipment", "args": {"id": 123}, "result": '{"eta": "Friday"}'}
    assert rule_turn(make_run("x1", [s, s, s]), "cycle") == 2
    assert rule_turn(make_run("x2", [a, b, a, b, a, b]), "cycle") == 4
    timeout = {"call": "get_order", "args": {"id": 123}, "error": "timed out after 5 s"}
    assert rule_turn(make_run("x3", [timeout, a]), "cycle") is None
    empty = [{"call": "search_docs", "args": {"q": f"q{i}"}, "result": "0 results"} for i in range(4)]
    assert rule_turn(make_run("x4", empty), "nothing-new") == 4
    assert rule_turn(make_run("x5", empty[:3]), "nothing-new") is None
    states = [{"call": "edit", "args": {"n": i}, "result": "ok", "state": st} for i, st in enumerate("ABAB")]
    assert rule_turn(make_run("x6", states), "state-cycle") == 4
    assert rule_turn(make_run("x7", states[:3]), "state-cycle") is None  # a lone revert
    assert set(RULE_FUNCTIONS) >= {r for run in STUCK for r in run.rules}


def test_loader_rejects_bad_records() -> None:
    with pytest.raises(CorpusError):
        make_run("bad", [{"call": "x", "args": {}}])  # neither result nor error
    with pytest.raises(CorpusError):
        make_run("bad", [{"call": "x", "result": "y"}], label="stuck")  # no rule / earliest turn
    with pytest.raises(CorpusError):
        make_run("bad", [{"call": "x", "result": "y", "bogus": 1}])
