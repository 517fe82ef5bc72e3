"""The 13 cases of seed 002 for ``first_repeat_turn`` (the contract of its ``solve``)."""

from __future__ import annotations

import pytest

from otel_progress import first_repeat_turn

S = ("search_tickets", {"q": "refund delay"}, "3 tickets: 811, 812, 840")
A = ("get_order", {"id": 123}, '{"status": "shipped"}')
B = ("get_shipment", {"id": 123}, '{"eta": "Friday"}')
C = ("get_invoice", {"id": 123}, '{"total": 40}')

CASES = [
    (([S, S, S], 2), 2),
    (([A, B, A, B, A, B], 2), None),
    (([A, B, A, B, A, B], 4), 4),
    (([("get_order", {"id": 123}, "error: timed out after 5 s"), A], 2), None),
    (([("get_deploy_status", {"id": "d-91"}, "pending"), ("get_deploy_status", {"id": "d-91"}, "done")], 2), None),
    (([("get_deploy_status", {"id": "d-91"}, "pending")] * 2, 6), 2),
    (([("f", {"a": 1, "b": 2}, "ok"), ("f", {"b": 2, "a": 1}, "ok")], 2), 2),
    (([A, B, C, A, B, C], 4), None),
    (([A, B, C, A, B, C], 6), 6),
    (([S, A, B, A, B], 4), 5),
    (([("search_tickets", {"q": "refund"}, "0 tickets"), S], 2), None),
    (([], 4), None),
    (([S, S], 1), None),
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=[f"case{i + 1}" for i in range(len(CASES))])
def test_seed_002_cases(args: tuple, expected: int | None) -> None:
    calls, window = args
    assert first_repeat_turn(calls, window) == expected


def test_arguments_as_json_string_equal_the_map() -> None:
    calls = [("f", '{"b": 2, "a": 1}', "ok"), ("f", {"a": 1, "b": 2}, "ok")]
    assert first_repeat_turn(calls, 2) == 2


def test_accepts_any_iterable_and_stops_at_first_repeat() -> None:
    def gen():
        yield S
        yield S
        raise AssertionError("read past the first repeat")

    assert first_repeat_turn(gen(), 4) == 2
