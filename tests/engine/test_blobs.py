"""Blobs are not novelty (issue 29, item 4): a screenshot that differs by a clock pixel does
not make a browser agent's loop look like progress; its text parts still tell pages apart."""

from __future__ import annotations

import base64
import struct
import zlib

from otel_progress.evidence.blobs import describe, describe_text, holds_blob, may_hold_blob
from tests.engine.helpers import as_json, brief, call, run

WIDTH, HEIGHT = 160, 100


def screenshot(second: int, page: int = 0) -> str:
    """A real PNG (stdlib zlib), base64: a page-coloured area and a 'clock' of 8 pixels
    whose shade is the second (what changes between two screenshots of one page)."""
    rows = []
    for y in range(HEIGHT):
        row = bytearray([0])
        for x in range(WIDTH):
            if y < 4 and x >= WIDTH - 8:
                row += bytes((second * 4 % 256, 0, 0))
            else:
                row += bytes(((x * 7 + page * 50) % 256, (y * 5 + page * 30) % 256, (x ^ y) % 256))
        rows.append(bytes(row))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", WIDTH, HEIGHT, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b""))
    return base64.b64encode(png).decode()


def page_result(text: str, second: int, page: int = 0) -> str:
    """An MCP browser tool's result: a text part and a screenshot part."""
    return as_json({"content": [{"type": "text", "text": text},
                                {"type": "image", "data": screenshot(second, page), "mimeType": "image/png"}]})


def test_a_screenshot_is_described_by_kind_and_size_class() -> None:
    shot = screenshot(1)
    assert shot != screenshot(2)
    text = f"Screenshot of the page: data:image/png;base64,{shot} (title: Flights)"
    described = describe_text(text)
    assert described.startswith("Screenshot of the page: <blob image/png ~") and described.endswith("(title: Flights)")
    assert describe_text(text.replace(shot, screenshot(2))) == described
    payload = describe({"content": [{"type": "image", "data": shot, "mimeType": "image/png"}]})
    assert payload["content"][0]["data"].startswith("<blob image/png ~")
    assert payload["content"][0]["mimeType"] == "image/png"


def test_words_digests_and_short_tokens_are_content() -> None:
    digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" * 5  # hex: no upper case
    for text in ("a" * 300, digest, "Token ABCdef123 " * 40, "x " * 600):
        assert describe_text(text) == text and not holds_blob(text)
    assert not may_hold_blob("short text, no payload")


def test_size_classes_tell_orders_of_size_apart() -> None:
    small = base64.b64encode(bytes(range(256)) * 2).decode()  # 512 bytes
    large = base64.b64encode(bytes(range(256)) * 200).decode()  # 51,200 bytes
    assert describe_text(small) == "<blob binary ~512B>"
    assert describe_text(large) == "<blob binary ~64KiB>"


def _clicks(n: int, same_page: bool = True) -> list[dict]:
    return [call("browser_click", as_json({"element": "Search button", "ref": "e12"} if same_page
                                          else {"element": f"Result {i}", "ref": f"e{20 + i}"}),
                 page_result("Page: Flight search. 0 results for Lima, 12 March." if same_page
                             else f"Page: flight {i}. Departs {8 + i}:00, gate B{i}.", second=i,
                             page=0 if same_page else i))
            for i in range(n)]


def test_the_same_click_answered_by_the_same_page_is_a_loop() -> None:
    detections = brief(run(_clicks(6)))
    assert detections and detections[0] == (2, "repeat_cycle", 1)


def test_a_browser_agent_moving_through_pages_stays_quiet() -> None:
    assert run(_clicks(6, same_page=False)) == []


def test_a_screenshot_in_plain_text_is_a_blob_too() -> None:
    calls = [call("screenshot", as_json({"full_page": True}),
                  f"Title: Flights\nImage: data:image/png;base64,{screenshot(i)}") for i in range(6)]
    detections = brief(run(calls))
    assert detections and detections[0][1] == "repeat_cycle"
