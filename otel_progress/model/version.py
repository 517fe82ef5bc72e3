"""The package's version (the one in pyproject.toml), in the lowest layer so that every
layer can name it (the adapters put it on their instrumentation scopes)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
