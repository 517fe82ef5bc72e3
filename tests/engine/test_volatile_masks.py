"""``mask_volatile`` masks each volatile token class wherever it occurs, including in texts
with non-ASCII characters (a long text is cut to its head and tail around a "…") and where
the substring tests that decide whether a pattern is tried see only a digit or hex shape."""

from __future__ import annotations

from otel_progress.evidence.volatile import MASK, mask_volatile


def test_each_token_class_is_masked() -> None:
    text = ("run 3f2b9c1e-07aa-4c2d-9e1f-AB12cd34EF56 at 2026-12-07T01:36:56.123Z took 12µs, then 0.53s;"
            " pid 4242 on localhost:8000 at 0x7f3a9c00, /tmp/tmpab12cd/ and x.py:191")
    masked = mask_volatile(text)
    for token in ("3f2b9c1e", "01:36:56", "12µs", "0.53s", "4242", ":8000", "0x7f3a", "tmpab12cd", ":191"):
        assert token not in masked, token
    assert masked.count(MASK) >= 8
    assert mask_volatile(masked) == masked


def test_tokens_in_a_long_text_cut_around_a_non_ascii_mark() -> None:
    head = "started 2026-12-07 01:36 é\n" + "x" * 9000
    tail = "y" * 9000 + "\nfinished in 3 seconds, id 123e4567-e89b-12d3-a456-426614174000"
    masked = mask_volatile(head + tail)
    assert "…" in masked
    assert "01:36" not in masked and "3 seconds" not in masked and "426614174000" not in masked


def test_near_misses_are_content() -> None:
    text = "version 1.2.3, 1/4 done, ab12-cd34-ef56-7890 is not a uuid, 10 items"
    assert mask_volatile(text) == text
