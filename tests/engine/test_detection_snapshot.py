"""Detections identical to the committed snapshot (see ``detection_snapshot.py``): on the
labelled corpus always, on the real runs where ``../shared/realtraces`` is present.

A failure shows the difference run by run. If the change is intended, regenerate the
snapshot with ``python -m tests.engine.detection_snapshot --write`` and commit it."""

from __future__ import annotations

import pytest

from . import detection_snapshot as snap


def _compare(path, actual: str) -> None:
    assert path.exists(), f"{path.name} is missing: run `{snap.REGENERATE}`"
    changes = snap.diff(path.read_text(encoding="utf-8"), actual, path.name)
    assert not changes, (f"the engine's detections changed; if that is intended, run `{snap.REGENERATE}`"
                         f" and commit the snapshot\n{changes}")


def test_corpus_detections_match_snapshot() -> None:
    _compare(snap.CORPUS_FILE, snap.render_corpus())


def test_real_run_detections_match_snapshot() -> None:
    files = snap.real_files()
    if not files:
        pytest.skip(f"no real runs at {snap.REAL_DIR} (they are not part of the project)")
    _compare(snap.REAL_FILE, snap.render_real(files))


def test_snapshot_lines_carry_no_content() -> None:
    """Only ids, positions, reasons, levels and scopes: five or six short fields a line."""
    for path, width in ((snap.CORPUS_FILE, 5), (snap.REAL_FILE, 6)):
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("#"):
                continue
            fields = line.split(" ")
            assert len(fields) in (width - 3, width), line
            assert all(len(f) <= 80 for f in fields), line
