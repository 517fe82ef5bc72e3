"""The tool manifest: which tools wait/poll and which tools write (seed 000).

A manifest is a JSON (or YAML) list of entries::

    [
      {"name": "get_build_status", "kind": "wait", "progress_field": "status",
       "waiting_values": ["queued", "running"],
       "terminal_values": ["success", "failed", "cancelled", "timed_out"],
       "max_wait_seconds": 1200, "min_interval_seconds": 5},
      {"name": "edit_file", "kind": "write"},
      {"name": "read_lines", "identity": ["path", "line"]},
      {"name": "search", "ignore": ["display_name", "reason"]}
    ]

An entry's ``identity`` and ``ignore`` (dotted paths into the arguments) declare what
identifies a request of that tool, where the default (every argument) is wrong: with
``identity`` only those arguments tell two requests apart; ``ignore`` leaves cosmetic ones
out (a label, the model's stated reason). An entry that declares only these needs no kind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ManifestError", "ToolSpec", "load_manifest", "parse_manifest"]

_KINDS = ("wait", "write", "call")


class ManifestError(ValueError):
    """A manifest that cannot be used; the message says where and why."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One manifest entry.

    Attributes:
        name: the tool name as it appears in ``gen_ai.tool.name``.
        kind: ``wait`` (a status poll that may repeat while waiting), ``write`` (a
            mutating tool whose successful call is progress) or ``call`` (neither: an entry
            that only declares ``identity`` or ``ignore``; the default).
        progress_field: for ``wait``: the field of the result holding the status, a dotted
            path for nested fields (``build.status``).
        waiting_values: statuses under which identical polls are legitimate.
        terminal_values: statuses after which polling again is a loop.
        max_wait_seconds: the wait budget, measured with span timestamps from the first
            poll that saw a waiting value.
        min_interval_seconds: polls closer together than this lose the exemption.
        identity: the argument paths (dotted: ``options.path``) that identify a request;
            empty: every argument does.
        ignore: argument paths that never tell two requests apart (cosmetic: a label, a
            stated reason).
    """

    name: str
    kind: str = "call"
    progress_field: str = "status"
    waiting_values: frozenset[str] = frozenset()
    terminal_values: frozenset[str] = frozenset()
    max_wait_seconds: float = 1200.0
    min_interval_seconds: float = 0.0
    identity: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    @property
    def declares_identity(self) -> bool:
        """Whether the entry says what identifies a request (``identity`` or ``ignore``)."""
        return bool(self.identity or self.ignore)

    def request_identity(self, arguments: Any) -> Any:
        """The part of a request's (parsed) ``arguments`` that identifies it: only the
        ``identity`` paths (those present), then without the ``ignore`` paths. Arguments
        that are not an object are their own identity."""
        if not isinstance(arguments, Mapping):
            return arguments
        kept: Any = _only(arguments, self.identity) if self.identity else arguments
        for path in self.ignore:
            kept = _without_path(kept, path.split("."))
        return kept

    def status_of(self, result: Any) -> str | None:
        """The status value in a (parsed) result, lower-cased, or None if absent."""
        node: Any = result
        for part in self.progress_field.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                return None
        if node is None or isinstance(node, (Mapping, list)):
            return None
        return str(node).strip().lower()


def _only(arguments: Mapping[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    """The arguments at ``paths`` (dotted), nested as they were; absent paths left out."""
    kept: dict[str, Any] = {}
    for path in paths:
        parts = path.split(".")
        node: Any = arguments
        for part in parts:
            if not isinstance(node, Mapping) or part not in node:
                break
            node = node[part]
        else:
            target = kept
            for part in parts[:-1]:
                target = target.setdefault(part, {})
            target[parts[-1]] = node
    return kept


def _without_path(value: Any, parts: list[str]) -> Any:
    """``value`` without the entry at the dotted path ``parts`` (a copy where it changes)."""
    if not isinstance(value, Mapping) or parts[0] not in value:
        return value
    head = parts[0]
    if len(parts) == 1:
        return {k: v for k, v in value.items() if k != head}
    inner = _without_path(value[head], parts[1:])
    return value if inner is value[head] else {**value, head: inner}


def _paths(entry: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(
            isinstance(v, str) and v.strip() and all(p for p in v.strip().split(".")) for v in value):
        raise ManifestError(f"{where}: '{key}' must be a list of argument paths (dotted names, as options.path)")
    return tuple(v.strip() for v in value)


def _strings(entry: Mapping[str, Any], key: str, where: str) -> frozenset[str]:
    value = entry.get(key, [])
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ManifestError(f"{where}: '{key}' must be a list of strings")
    return frozenset(str(v).strip().lower() for v in value)


def _number(entry: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ManifestError(f"{where}: '{key}' must be a non-negative number, got {value!r}")
    return float(value)


def parse_manifest(data: Any, source: str = "manifest") -> dict[str, ToolSpec]:
    """Validate manifest data (a list of entries) into specs keyed by tool name."""
    if isinstance(data, Mapping) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list):
        raise ManifestError(f"{source}: expected a list of tool entries, got {type(data).__name__}")
    specs: dict[str, ToolSpec] = {}
    for i, entry in enumerate(data):
        where = f"{source}: entry {i}"
        if not isinstance(entry, Mapping):
            raise ManifestError(f"{where}: expected an object")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ManifestError(f"{where}: 'name' must be a non-empty string")
        where = f"{source}: entry {i} ({name})"
        kind = entry.get("kind", "call")
        if kind not in _KINDS:
            raise ManifestError(f"{where}: 'kind' must be one of {', '.join(_KINDS)}, got {kind!r}")
        identity, ignore = _paths(entry, "identity", where), _paths(entry, "ignore", where)
        if kind == "call" and not (identity or ignore):
            raise ManifestError(f"{where}: an entry without 'kind' (or with kind 'call') must declare"
                                " 'identity' or 'ignore', or it says nothing about the tool")
        if kind == "wait":
            field_ = entry.get("progress_field", "status")
            if not isinstance(field_, str) or not field_:
                raise ManifestError(f"{where}: 'progress_field' must be a non-empty string")
            waiting = _strings(entry, "waiting_values", where)
            terminal = _strings(entry, "terminal_values", where)
            if not terminal:
                raise ManifestError(
                    f"{where}: a wait tool needs 'terminal_values', or a finished job would be"
                    " polled forever without a detection"
                )
            if waiting & terminal:
                raise ManifestError(f"{where}: values both waiting and terminal: {sorted(waiting & terminal)}")
            spec = ToolSpec(
                name=name,
                kind=kind,
                progress_field=field_,
                waiting_values=waiting,
                terminal_values=terminal,
                max_wait_seconds=_number(entry, "max_wait_seconds", 1200.0, where),
                min_interval_seconds=_number(entry, "min_interval_seconds", 0.0, where),
                identity=identity,
                ignore=ignore,
            )
        else:
            spec = ToolSpec(name=name, kind=kind, identity=identity, ignore=ignore)
        if name in specs:
            raise ManifestError(f"{where}: tool listed twice")
        specs[name] = spec
    return specs


def read_structured(path: str, what: str, error: type[ValueError]) -> Any:
    """Read a JSON file, or a YAML file when the name ends in .yaml/.yml (needs PyYAML);
    failures raise ``error`` with the path and the reason."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc.strerror or exc}") from exc
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise error(f"{path}: a YAML {what} needs PyYAML (pip install otel-progress[yaml])") from exc
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise error(f"{path}: invalid YAML: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise error(f"{path}: invalid JSON: {exc}") from exc


def load_manifest(path: str | os.PathLike[str]) -> dict[str, ToolSpec]:
    """Read a manifest file: JSON, or YAML when the name ends in .yaml/.yml (needs PyYAML)."""
    path = os.fspath(path)
    return parse_manifest(read_structured(path, "manifest", ManifestError), path)
