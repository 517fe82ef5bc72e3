"""Engine state that outlives its process: the codec of checkpoints and hand-off entries.

The engine's state is Python objects whose digests are the process's own (``hash(...)``,
salted by ``PYTHONHASHSEED``: :meth:`~otel_progress.evidence.canonical.Digester.local`), so
state written by one process means something only to a process with the same hash seed,
the same digest key and the same package version. :class:`StateCodec` writes any object of
the state (a trace's :class:`~.tables.TraceState` and its runs, the service's bundle around
it) as

``MAGIC | len | fingerprint (JSON) | HMAC-SHA256 | pickle``

* the **fingerprint** says what wrote it: the format, the package version, the Python
  version, a probe of the hash seed (``hash()`` of a fixed text) and a digest of the digest
  key. One that differs from the reader's is **foreign** (:class:`ForeignState`);
* the **HMAC** (keyed with the digest key) covers fingerprint and payload: bytes changed or
  cut are **corrupt** (:class:`CorruptState`). Without a digest key the HMAC only checks
  integrity (the key is public): the store must then be trusted;
* the payload is a pickle whose references to the writer's pipeline (configuration,
  digester, signals) are written as names (``_shared_ref``) and bound to the reader's own
  on load; it is loaded with an allow-list of classes (the package's own classes and a
  few containers, a few named objects of the package), never arbitrary callables.

The codec has no I/O: the service writes the bytes to a file or a store.
"""

from __future__ import annotations

import copyreg
import hashlib
import hmac
import io
import json
import pickle
import sys
from typing import Any

from ..evidence.canonical import Digester
from ..model.version import __version__
from .config import Config

__all__ = ["FORMAT", "CorruptState", "ForeignState", "StateCodec", "StateError", "hash_probe"]

MAGIC = b"OTPS"
FORMAT = 1
_PROBE_TEXT = "otel-progress state probe v1"
_MAC_SIZE = 32

#: Classes outside the package a state may hold (module, name).
_ALLOWED = frozenset({
    ("collections", "OrderedDict"), ("collections", "deque"), ("collections", "defaultdict"),
    ("array", "array"), ("array", "_array_reconstructor"), ("builtins", "set"), ("builtins", "frozenset"),
    ("builtins", "bytearray"), ("builtins", "complex"), ("builtins", "slice"), ("builtins", "range"),
    ("copyreg", "_reconstructor"), ("builtins", "object"), ("types", "MappingProxyType"),
})
#: The package's objects that are not classes a state may hold: markers compared with
#: ``is``, functions a state keeps (never called on load).
_MARKERS = frozenset({("otel_progress.model", "NOT_CAPTURED"), ("otel_progress.evidence.volatile", "mask_volatile")})


class StateError(ValueError):
    """State bytes that cannot be used (the message says why)."""


class ForeignState(StateError):
    """State written by another version, hash seed, digest key or format."""


class CorruptState(StateError):
    """State bytes that are not a state, were changed or were cut."""


def _shared_ref(name: str) -> Any:
    """Written in place of an object of the writer's engine (bound to the reader's own on
    load: :class:`_Unpickler`); never called."""
    raise StateError(f"state refers to the engine's {name!r}: read it with StateCodec.loads")


def hash_probe() -> int:
    """``hash()`` of a fixed text: equal in two processes only with the same hash seed."""
    return hash(_PROBE_TEXT)


class StateCodec:
    """Writes and reads state objects bound to one engine's pipeline (see the module
    docstring).

    Args:
        config: the engine's configuration (its ``digest_key`` keys the HMAC).
        shared: the objects of the reader's engine a state refers to but must not carry
            (pipeline, configuration, digester, signals), by a stable name each.
    """

    def __init__(self, config: Config, shared: dict[str, Any]) -> None:
        key = (config.digest_key or "").encode("utf-8", "surrogatepass")
        self._mac_key = hashlib.sha256(b"otel-progress state mac v1\x00" + key).digest()
        key_id = hashlib.sha256(b"otel-progress state key id v1\x00" + key).hexdigest()[:16] if key else ""
        self.fingerprint: dict[str, Any] = {
            "format": FORMAT, "version": __version__, "python": "{}.{}".format(*sys.version_info[:2]),
            "probe": hash_probe(), "key": key_id,
        }
        self._header = json.dumps(self.fingerprint, sort_keys=True, separators=(",", ":")).encode()
        by_id = {id(obj): name for name, obj in shared.items()}
        self._by_name = dict(shared)

        def reduce(obj: Any) -> Any:
            name = by_id.get(id(obj))
            return (_shared_ref, (name,)) if name is not None else obj.__reduce_ex__(5)

        self._dispatch = copyreg.dispatch_table.copy()
        for obj in shared.values():
            self._dispatch[type(obj)] = reduce
        self.keyed = bool(key)

    @classmethod
    def for_pipeline(cls, pipeline: Any, extra: dict[str, Any] | None = None) -> StateCodec:
        """The codec of an engine's pipeline (its configuration, digester and signals are
        shared, not written)."""
        shared: dict[str, Any] = {"pipeline": pipeline, "config": pipeline.config}
        digester = getattr(pipeline, "digester", None)
        if isinstance(digester, Digester):
            shared["digester"] = digester
        for i, signal in enumerate(getattr(pipeline, "signals", ())):
            shared[f"signal:{i}:{type(signal).__name__}"] = signal
        for i, signal in enumerate(getattr(pipeline, "model_signals", ())):
            shared[f"model_signal:{i}:{type(signal).__name__}"] = signal
        shared.update(extra or {})
        return cls(pipeline.config, shared)

    # -- writing ------------------------------------------------------------------------

    def dumps(self, obj: Any) -> bytes:
        """The bytes of ``obj``. Raises :class:`StateError` for an object that cannot be
        written (something in it is not state)."""
        buf = io.BytesIO()
        pickler = pickle.Pickler(buf, protocol=5)
        pickler.dispatch_table = self._dispatch  # (the shared objects by name: looked up by type, in C)
        try:
            pickler.dump(obj)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
            raise StateError(f"cannot write state: {exc}") from exc
        payload = buf.getvalue()
        header = self._header
        mac = hmac.new(self._mac_key, header + payload, hashlib.sha256).digest()
        return MAGIC + len(header).to_bytes(2, "big") + header + mac + payload

    # -- reading ------------------------------------------------------------------------

    def check(self, data: bytes) -> tuple[bytes, bytes]:
        """The (header, payload) of state bytes written by a compatible process. Raises
        :class:`ForeignState` or :class:`CorruptState`."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CorruptState("not bytes")
        data = bytes(data)
        if len(data) < len(MAGIC) + 2 or not data.startswith(MAGIC):
            raise CorruptState("not an otel-progress state (bad magic)")
        size = int.from_bytes(data[4:6], "big")
        header = data[6:6 + size]
        try:
            theirs = json.loads(header)
        except ValueError as exc:
            raise CorruptState("unreadable fingerprint") from exc
        if len(header) != size or not isinstance(theirs, dict):
            raise CorruptState("cut short")
        if theirs != self.fingerprint:
            diff = ", ".join(f"{k}: {theirs.get(k)!r} here {v!r}" for k, v in self.fingerprint.items()
                             if theirs.get(k) != v)
            raise ForeignState(f"written by another process set-up ({diff or 'unknown fields'})")
        mac, payload = data[6 + size:6 + size + _MAC_SIZE], data[6 + size + _MAC_SIZE:]
        if len(mac) != _MAC_SIZE or not hmac.compare_digest(
                mac, hmac.new(self._mac_key, header + payload, hashlib.sha256).digest()):
            raise CorruptState("authentication failed (changed or cut bytes, or another digest key)")
        return header, payload

    def loads(self, data: bytes) -> Any:
        """The object of state bytes. Raises :class:`ForeignState` or :class:`CorruptState`."""
        _header, payload = self.check(data)
        unpickler = _Unpickler(io.BytesIO(payload), self._by_name)
        try:
            return unpickler.load()
        except StateError:
            raise
        except Exception as exc:  # any unpickling failure is a corrupt state
            raise CorruptState(f"unreadable payload: {type(exc).__name__}: {exc}") from exc


class _Unpickler(pickle.Unpickler):
    """Loads only the package's classes and a few containers; binds shared names."""

    def __init__(self, file: io.BytesIO, shared: dict[str, Any]) -> None:
        super().__init__(file)
        self._shared = shared

    def _shared_object(self, name: Any) -> Any:
        try:
            return self._shared[name]
        except (KeyError, TypeError):
            raise CorruptState(f"refers to {name!r}, which this engine does not have") from None

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == (__name__, "_shared_ref"):
            return self._shared_object
        if (module, name) in _ALLOWED or (module, name) in _MARKERS:
            return super().find_class(module, name)
        if module == "otel_progress" or module.startswith("otel_progress."):
            obj = super().find_class(module, name)
            if isinstance(obj, type):
                return obj
        raise CorruptState(f"holds {module}.{name}, which is not state")
