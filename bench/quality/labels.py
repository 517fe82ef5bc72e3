"""Every hand label of the real runs, in one model: the dev and added halves'
``real_labels.yaml`` and the SWE-bench half's label files, read where they are.

The model (what :func:`bench.quality.real.load_labels` gives, plus ``no_loop``):

* ``loops``: ``{run, window: [a, b], why}``, a loop and the call window in which it is
  provable (``borderline: true`` where the labeller said so);
* ``detections``: ``{run, call, verdict, why}``, the hand review of a detection: verdict
  ``real_loop``, ``false_alarm`` or (SWE-bench review only) ``borderline``;
* ``no_detection``: ``real_labels.yaml``'s runs without a detection read for misses;
* ``no_loop``: ``{run, why}``, every run labelled as holding no loop (``no_detection``
  entries with verdict ``no_loop``; SWE-bench runs labelled ``no loop``).

The SWE-bench half has two label files of one shape (``runs: {run id: {passed, label
"loop" | "no loop", window [a, b] | null, borderline, note}}``): the 13 runs of
``../shared/realtraces/swebench/openhands_swebv.labels.json`` (read from there at run time,
never copied into the project) and the project's 44 in ``openhands_swebv_labels.json``. The
review of detections on it is ``openhands_swebv_review.json`` (``reviews: [{run, call,
reason, verdict: real | false_alarm | borderline, why}]``), read when present.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import real
from .realruns import REAL_DIR

__all__ = ["SWEBV_LABELS", "SWEBV_REVIEW", "SWEBV_SHARED_LABELS", "load_all_labels", "load_swebv_labels"]

HERE = Path(__file__).parent
SWEBV_SHARED_LABELS = REAL_DIR / "swebench" / "openhands_swebv.labels.json"
SWEBV_LABELS = HERE / "openhands_swebv_labels.json"
SWEBV_REVIEW = HERE / "openhands_swebv_review.json"

_VERDICTS = {"real": "real_loop", "false_alarm": "false_alarm", "borderline": "borderline"}


def _read(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def load_swebv_labels(shared: Path = SWEBV_SHARED_LABELS, own: Path = SWEBV_LABELS,
                      review: Path = SWEBV_REVIEW) -> dict[str, list[dict[str, Any]]]:
    """The SWE-bench half's labels in the model above (files that are absent give nothing)."""
    out: dict[str, list[dict[str, Any]]] = {"loops": [], "detections": [], "no_detection": [], "no_loop": []}
    for path in (shared, own):
        if not path.is_file():
            continue
        for run, entry in _read(path)["runs"].items():
            why = f"{path.name}: {entry.get('note', '')}"
            if entry["label"] == "loop":
                first, last = entry["window"]
                out["loops"].append({"run": run, "window": [int(first), int(last)], "why": why,
                                     "borderline": bool(entry.get("borderline"))})
            elif entry["label"] == "no loop":
                out["no_loop"].append({"run": run, "why": why})
            else:
                raise ValueError(f"{path}: {run}: unknown label {entry['label']!r}")
    if review.is_file():
        for entry in _read(review).get("reviews", []):
            out["detections"].append({"run": entry["run"], "call": int(entry["call"]),
                                      "verdict": _VERDICTS[entry["verdict"]], "why": entry.get("why", "")})
    return out


def load_all_labels() -> dict[str, list[dict[str, Any]]]:
    """``real_labels.yaml`` and the SWE-bench half's labels, merged."""
    labels: dict[str, list[dict[str, Any]]] = {k: list(v) for k, v in real.load_labels().items()}
    labels["no_loop"] = [{"run": e["run"], "why": e.get("why", "")}
                         for e in labels["no_detection"] if e.get("verdict") == "no_loop"]
    for key, entries in load_swebv_labels().items():
        labels[key] += entries
    return labels
