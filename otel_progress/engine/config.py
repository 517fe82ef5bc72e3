"""Engine configuration: thresholds, the tool manifest and the digest key.

Every field can be set three ways, the later overriding the earlier: its default, a
config file (``--config`` / ``OTEL_PROGRESS_CONFIG``), and an environment variable named
``OTEL_PROGRESS_<FIELD>`` in upper case (for example ``OTEL_PROGRESS_WINDOW=12``).
docs/configuration.md lists every key.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..evidence.canonical import DEFAULT_VOLATILE_KEYS
from .manifest import ManifestError, ToolSpec, load_manifest, parse_manifest, read_structured

__all__ = ["ENV_PREFIX", "SIGNAL_NAMES", "Config", "ConfigError"]

ENV_PREFIX = "OTEL_PROGRESS_"

#: The names of the detection signals, in pipeline order (cheap first).
SIGNAL_NAMES: tuple[str, ...] = (
    "wait",
    "compaction",
    "repeat",
    "frequency",
    "errors",
    "barren",
    "revisit",
    "location",
    "signature",
    "measure",
    "same_answer",
    "run_signature",
    "conversation",
    "text_repeat",
    "unexecuted",
)

DEFAULT_WAITING_VALUES: frozenset[str] = frozenset(
    {
        "pending", "queued", "running", "in_progress", "in progress", "inprogress",
        "waiting", "started", "starting", "processing", "provisioning", "creating",
        "building", "deploying", "scheduled", "initializing", "accepted", "active",
    }
)


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key and source."""


@dataclass(frozen=True)
class Config:
    """All engine settings. Each key is documented in docs/configuration.md."""

    window: int = 10
    frequency_count: int = 4
    frequency_window: int = 30
    barren_threshold: int = 4
    revisit_threshold: int = 2
    location_revisit_threshold: int = 3
    signature_visits: int = 3
    measure_visits: int = 3
    error_threshold: int = 5
    repeat_failure_threshold: int = 3
    same_answer_count: int = 3
    text_repeat_count: int = 3
    unexecuted_count: int = 3
    reorder_window: int = 16
    max_evidence: int = 256
    volatile_keys: frozenset[str] = DEFAULT_VOLATILE_KEYS
    implicit_waits: bool = True
    waiting_values: frozenset[str] = DEFAULT_WAITING_VALUES
    implicit_max_wait_seconds: float = 1800.0
    disabled_signals: frozenset[str] = frozenset()
    manifest: Mapping[str, ToolSpec] = field(default_factory=dict)
    digest_key: str | None = dataclasses.field(default=None, repr=False)
    max_runs: int = 10_000
    run_ttl_seconds: float = 3600.0
    conversation_turns: int = 3
    max_conversations: int = 10_000
    conversation_ttl_seconds: float = 3600.0

    def __post_init__(self) -> None:
        for name in (
            "window", "frequency_count", "frequency_window", "barren_threshold",
            "revisit_threshold", "location_revisit_threshold", "signature_visits", "measure_visits", "error_threshold",
            "repeat_failure_threshold", "same_answer_count", "unexecuted_count", "max_evidence", "max_runs",
            "conversation_turns", "max_conversations",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: must be a whole number >= 1, got {value!r}")
        if isinstance(self.text_repeat_count, bool) or not isinstance(self.text_repeat_count, int) \
                or self.text_repeat_count < 3:
            # two occurrences are a conclusion restated once, how answers are written
            # (engine/signals/text.py): a repeat needs a third
            raise ConfigError(f"text_repeat_count: must be a whole number >= 3, got {self.text_repeat_count!r}")
        if self.reorder_window < 0:
            raise ConfigError(f"reorder_window: must be >= 0, got {self.reorder_window!r}")
        if self.frequency_count > self.frequency_window:
            raise ConfigError(
                f"frequency_count ({self.frequency_count}) cannot exceed frequency_window"
                f" ({self.frequency_window})"
            )
        unknown = set(self.disabled_signals) - set(SIGNAL_NAMES)
        if unknown:
            raise ConfigError(
                f"disabled_signals: unknown signal(s) {sorted(unknown)}; known: {', '.join(SIGNAL_NAMES)}"
            )

    def enabled(self, signal: str) -> bool:
        """Whether the named signal runs."""
        return signal not in self.disabled_signals

    def replace(self, **changes: Any) -> Config:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

    # -- loading -------------------------------------------------------------------------

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "config", base: Config | None = None) -> Config:
        """Build from a mapping of keys to values (a config file's content)."""
        base = base or cls()
        fields = {f.name: f for f in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}
        for key, value in data.items():
            if key in ("manifest", "tools"):
                try:
                    changes["manifest"] = parse_manifest(value, f"{source}: {key}")
                except ManifestError as exc:
                    raise ConfigError(str(exc)) from exc
                continue
            if key == "manifest_file":
                changes["manifest"] = _manifest_file(str(value))
                continue
            if key not in fields:
                raise ConfigError(f"{source}: unknown key {key!r}; known keys: {', '.join(sorted(fields))}")
            changes[key] = _coerce(key, fields[key], value, source)
        try:
            return dataclasses.replace(base, **changes)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from exc

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], base: Config | None = None) -> Config:
        """Read a config file: a JSON/YAML object of keys, or a bare list (the manifest)."""
        path = os.fspath(path)
        data = read_structured(path, "config", ConfigError)
        if isinstance(data, list):
            try:
                return dataclasses.replace(base or cls(), manifest=parse_manifest(data, path))
            except ManifestError as exc:
                raise ConfigError(str(exc)) from exc
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: expected an object of settings or a list of tool entries")
        return cls.from_mapping(data, path, base)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, base: Config | None = None) -> Config:
        """Apply ``OTEL_PROGRESS_CONFIG``, ``OTEL_PROGRESS_MANIFEST`` and per-key variables."""
        env = os.environ if environ is None else environ
        config = base or cls()
        if env.get(ENV_PREFIX + "CONFIG"):
            config = cls.from_file(env[ENV_PREFIX + "CONFIG"], config)
        if env.get(ENV_PREFIX + "MANIFEST"):
            config = dataclasses.replace(config, manifest=_manifest_file(env[ENV_PREFIX + "MANIFEST"]))
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "manifest"}
        changes: dict[str, Any] = {}
        for name, f in fields.items():
            var = ENV_PREFIX + name.upper()
            if var in env and env[var] != "":
                changes[name] = _coerce(name, f, env[var], var)
        try:
            return dataclasses.replace(config, **changes)
        except ConfigError as exc:
            raise ConfigError(f"environment: {exc}") from exc


def _manifest_file(path: str) -> dict[str, ToolSpec]:
    try:
        return load_manifest(path)
    except ManifestError as exc:
        raise ConfigError(str(exc)) from exc


SCALAR_TYPES = (bool, int, float)


def coerce_scalar(default: bool | int | float, value: Any) -> Any:
    """Convert a setting from a file, a flag or the environment to the type of its default
    (one of :data:`SCALAR_TYPES`); raises ValueError with the reason."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError("expected true or false")
    if isinstance(default, int):
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("expected a whole number")
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    if isinstance(default, float):
        if isinstance(value, bool):
            raise ValueError("expected a number")
        return float(str(value).strip()) if isinstance(value, str) else float(value)
    raise TypeError(f"not a scalar setting: {default!r}")


def _coerce(name: str, f: dataclasses.Field[Any], value: Any, source: str) -> Any:
    """Convert a value from a file or the environment to the field's type."""
    default = f.default if f.default is not dataclasses.MISSING else None
    try:
        if isinstance(default, SCALAR_TYPES):
            return coerce_scalar(default, value)
        if isinstance(default, frozenset):
            items = value.split(",") if isinstance(value, str) else list(value)
            return frozenset(str(v).strip().lower() if name != "volatile_keys" else str(v).strip()
                             for v in items if str(v).strip())
        if name == "digest_key":
            return None if value in (None, "") else str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {name}: cannot use {value!r}: {exc}") from exc
    return value
