"""One cached ``node_modules`` per framework directory of the JavaScript matrix: where it
lives, how it is installed (``npm ci`` from the committed lockfile, one installer at a time
per directory, across processes), and the copy of the agent code that runs from it."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from .rows import LOCKFILE, PACKAGE, ROOT, SETUPS_DIR, discover

CACHE_DIR = Path(os.environ.get("OTEL_PROGRESS_MATRIX_JS_CACHE", "~/.cache/otel-progress/frameworks-js")).expanduser()
INSTALL_TIMEOUT_S = 15 * 60
#: npm output that means the registry could not be reached (not a bad pin).
_NETWORK_ERRORS = re.compile(r"ENOTFOUND|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EAI_AGAIN|network request|socket hang up")
#: Agent code copied next to the installed packages (Node resolves packages from the
#: importing file's directory upwards, so the code must sit inside the installed tree).
_CODE_SUFFIXES = (".mjs", ".js", ".json")


class InstallError(RuntimeError):
    """npm could not install a framework's packages; ``network`` when the registry was unreachable."""

    def __init__(self, message: str, network: bool) -> None:
        super().__init__(message)
        self.network = network


def node_major() -> str:
    """The major version of the ``node`` on PATH (part of the cache key)."""
    node = shutil.which("node")
    if node is None:
        raise InstallError("node is not on PATH: the JavaScript matrix needs Node.js and npm", network=False)
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    return out.strip().lstrip("v").split(".")[0] or "?"


def env_path(directory: Path) -> Path:
    """Where a framework's packages are installed: named after the framework, keyed by its
    ``package.json`` and ``package-lock.json`` and Node's major version; not by the
    checkout (the code that runs is copied from the checkout for each run)."""
    key = hashlib.sha256()
    for part in ((directory / PACKAGE).read_text(), (directory / LOCKFILE).read_text(), node_major()):
        key.update(part.encode())
        key.update(b"\0")
    return CACHE_DIR / f"{directory.name}-{key.hexdigest()[:12]}"


def _say(message: str) -> None:
    print(f"[frameworks_js] {message}", file=sys.stderr, flush=True)


def install(directory: Path) -> Path:
    """The installed packages of a framework directory: reused when complete, else
    installed with ``npm ci`` (one installer at a time per key). Raises :class:`InstallError`."""
    env = env_path(directory)
    done = env / ".complete"
    if done.exists():
        return env
    npm = shutil.which("npm")
    if npm is None:
        raise InstallError("npm is not on PATH: the JavaScript matrix needs Node.js and npm", network=False)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    log = env.with_suffix(".log")
    with open(env.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return env
        shutil.rmtree(env, ignore_errors=True)
        env.mkdir(parents=True)
        for name in (PACKAGE, LOCKFILE):
            shutil.copy2(directory / name, env / name)
        _say(f"installing {env.name} for {directory.name} (log: {log})")
        start = time.monotonic()
        cmd = [npm, "ci", "--no-audit", "--no-fund", "--loglevel=warn", "--ignore-scripts"]
        npm_env = {k: v for k, v in os.environ.items() if not k.startswith(("NODE_OPTIONS", "npm_config_prefix"))}
        with log.open("w") as out:
            out.write(f"$ {' '.join(cmd)}  (in {env})\n")
            out.flush()
            try:
                proc = subprocess.run(cmd, cwd=env, stdout=out, stderr=subprocess.STDOUT, env=npm_env,
                                      timeout=INSTALL_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                shutil.rmtree(env, ignore_errors=True)
                raise InstallError(f"npm ci for {directory.name} timed out after {INSTALL_TIMEOUT_S} s; see {log}",
                                   network=False) from None
        if proc.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            text = log.read_text()
            raise InstallError(f"npm ci for {directory.name} failed:\n{text[-3000:]}",
                               network=bool(_NETWORK_ERRORS.search(text)))
        done.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
        _say(f"installed {env.name} in {time.monotonic() - start:.0f} s")
    return env


def app_dir(env: Path, framework: str) -> Path:
    """This checkout's agent code of ``framework`` (and the shared ``_common``) copied into
    ``env`` (a directory per checkout, refreshed on every call), so that Node resolves the
    packages from ``env/node_modules``. Returns the framework's directory in that copy."""
    digest = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    base = env / f"app-{digest}"
    for name in ("_common", framework):
        src, dest = SETUPS_DIR / name, base / name
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=env))
        for path in src.iterdir():
            if path.is_file() and path.suffix in _CODE_SUFFIXES and path.name not in (PACKAGE, LOCKFILE):
                shutil.copy2(path, tmp / path.name)
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(dest)
    return base / framework


def prebuild(directories: Iterable[Path] | None = None) -> int:
    """Install every framework's packages (CI starts this in the background before the
    tests). Returns 1 if any install failed (the tests that need it fail and say why)."""
    dirs = list(dict.fromkeys(directories or (s.directory for s in discover())))
    start = time.monotonic()
    failed = 0
    for directory in dirs:
        try:
            install(directory)
        except InstallError as exc:
            failed += 1
            _say(str(exc).splitlines()[0])
    _say(f"prebuild: {len(dirs)} framework installs, {failed} failed, {time.monotonic() - start:.0f} s")
    return 1 if failed else 0
