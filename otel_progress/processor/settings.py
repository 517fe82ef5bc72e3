"""The processor's settings as the instrumentor and the doctor read them: the engine
configuration from the instrumentor's options and the environment (:func:`build_config`)
and the detection hook named by a setting (:func:`load_hook`)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..engine.config import Config, ConfigError

if TYPE_CHECKING:
    from .span_processor import DetectionHook

__all__ = ["SECTION", "build_config", "load_hook"]

#: The instrumentor's section of the declarative configuration file.
SECTION = "instrumentation/development.python.progress"


def load_hook(spec: Any) -> DetectionHook | None:
    """A hook given as a callable or as ``"module:attribute"``."""
    if spec is None or spec == "":
        return None
    if callable(spec):
        return spec  # type: ignore[no-any-return]
    module_name, _, attr = str(spec).partition(":")
    if not module_name or not attr:
        raise ConfigError(f"on_detection: expected 'module:function', got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"on_detection: cannot load {spec!r}: {exc}") from exc
    if not callable(target):
        raise ConfigError(f"on_detection: {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


def build_config(options: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Config:
    """The engine settings: defaults, then ``config_file``, then the options, then the
    environment (``OTEL_PROGRESS_CONFIG``, ``OTEL_PROGRESS_MANIFEST``, per-key variables)."""
    options = dict(options)
    config = Config()
    config_file = options.pop("config_file", None)
    if config_file:
        config = Config.from_file(str(config_file), config)
    if options:
        config = Config.from_mapping(options, SECTION, config)
    return Config.from_env(environ, base=config)
