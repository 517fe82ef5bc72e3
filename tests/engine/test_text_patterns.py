"""The text patterns of the evidence layer that were rewritten for speed find what the plain
patterns they replaced find, token for token: the fact-like tokens of
:func:`otel_progress.evidence.content.same_prose`, the opaque-token candidates, content words."""

from __future__ import annotations

import random
import re

from otel_progress.evidence import content

#: The plain pattern: tried at every position (quadratic on a long stretch without a digit).
PLAIN = re.compile(r"\S*\d\S*|https?://\S+|\S*[/\\]\S+|\S+@\S+|\"[^\"]{1,80}\"|'[^']{1,80}'")
PIECES = [*"ab1/\\@\"' \n\tx:h.", "http://", "https://", "https://a", ' "q" ', "'s'", "é", "\u0663", "x@y"]


def _spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    return [m.span() for m in pattern.finditer(text)]


def test_same_tokens_as_the_plain_pattern_on_generated_texts() -> None:
    rng = random.Random(26)
    for _ in range(40_000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 16)))
        assert _spans(content._FACT, text) == _spans(PLAIN, text), text


def test_same_tokens_on_real_looking_outputs() -> None:
    texts = [
        "Traceback (most recent call last):\n  File \"/repo/x.py\", line 12, in <module>\n"
        "ValueError: 'abc' is not valid; see https://example.org/a?b=1 or mail me@example.org",
        "=" * 5000 + " passed in 0.53s " + "a" * 3000 + "'quoted name' and \"x\"y1",
        "'x'1abc \"unterminated " + "b" * 200 + ' "' + "c" * 90 + '"',
    ]
    for text in texts:
        assert _spans(content._FACT, text) == _spans(PLAIN, text)
    assert content._facts(texts[0]) >= {"12", "https://example.org/a?b=1", "me@example.org", "'abc'"}


#: The opaque-token candidate as it was written before it opened with its first character.
PLAIN_CANDIDATE = re.compile(r"(?<![\w+-])(?=[\w+.:-]*\d)[A-Za-z0-9][\w+.:-]{7,}(?<![.:-])(?![\w+-])")


def test_opaque_candidates_as_the_plain_pattern_finds_them() -> None:
    from otel_progress.evidence import opaque

    rng = random.Random(27)
    pieces = [*"aZ9_+.:-/ \n", "abc123def", "0x1f", "é", "\u0663", "E171:FA573:405053D"]
    for _ in range(40_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert _spans(opaque._CANDIDATE, text) == _spans(PLAIN_CANDIDATE, text), text


def test_content_words_of_ascii_and_other_texts() -> None:
    assert content._words("The Quick brown FOX jumps over the lazy dog 42 times") == {
        "quick", "brown", "fox", "jumps", "lazy", "dog", "times"}
    assert content._words("Ärger über DIE Straße") == {"ärger", "über", "die", "straße"}
