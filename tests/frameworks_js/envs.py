"""One cached ``node_modules`` per framework directory of the JavaScript matrix: where it
lives, how it is installed (``npm ci`` from the committed lockfile, one installer at a time
per directory, across processes: :mod:`tests._matrix.builds`), and the copy of the agent code
that runs from it."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tests._matrix import builds
from tests._matrix.runs import environ_without

from .rows import LOCKFILE, PACKAGE, ROOT, SETUPS_DIR, discover

CACHE_DIR = builds.cache_root("OTEL_PROGRESS_MATRIX_JS_CACHE", "~/.cache/otel-progress/frameworks-js")
INSTALL_TIMEOUT_S = 15 * 60
#: npm output that means the registry could not be reached (not a bad pin).
_NETWORK_ERRORS = re.compile(r"ENOTFOUND|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EAI_AGAIN|network request|socket hang up")
#: Agent code copied next to the installed packages (Node resolves packages from the
#: importing file's directory upwards, so the code must sit inside the installed tree).
_CODE_SUFFIXES = (".mjs", ".js", ".json")
_NO_NPM = "npm is not on PATH: the JavaScript matrix needs Node.js and npm"
PROGRESS = builds.Progress("frameworks_js")


class InstallError(builds.BuildFailed):
    """npm could not install a framework's packages; ``network`` when the registry was unreachable."""


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
    key = builds.cache_key(((directory / PACKAGE).read_text(), (directory / LOCKFILE).read_text(), node_major()))
    return CACHE_DIR / f"{directory.name}-{key}"


def install(directory: Path) -> Path:
    """The installed packages of a framework directory: reused when complete, else
    installed with ``npm ci`` (one installer at a time per key). Raises :class:`InstallError`."""
    env = env_path(directory)
    npm = shutil.which("npm")
    if npm is None and not (env / builds.COMPLETE).exists():
        raise InstallError(_NO_NPM, network=False)

    def build(log: Path) -> None:
        if npm is None:
            raise InstallError(_NO_NPM, network=False)
        env.mkdir(parents=True)
        for name in (PACKAGE, LOCKFILE):
            shutil.copy2(directory / name, env / name)
        builds.run_steps([[npm, "ci", "--no-audit", "--no-fund", "--loglevel=warn", "--ignore-scripts"]], log,
                         what=f"npm ci for {directory.name}", timeout=INSTALL_TIMEOUT_S, network=_NETWORK_ERRORS,
                         error=InstallError, env=environ_without(("NODE_OPTIONS", "npm_config_prefix")), cwd=env)

    return builds.build_once(env, directory.name, build, PROGRESS, verbs=("installing", "installed"))


def app_dir(env: Path, framework: str) -> Path:
    """This checkout's agent code of ``framework`` (and the shared ``_common``) copied into
    ``env`` (a directory per checkout, refreshed on every call), so that Node resolves the
    packages from ``env/node_modules``. Returns the framework's directory in that copy."""
    base = env / f"app-{builds.checkout_digest(ROOT)}"
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
    """Install every framework's packages, or those of ``directories`` (a test session starts
    this in the background: :mod:`tests._background`). Returns 1 if any install failed (the
    tests that need it fail and say why)."""
    dirs = list(dict.fromkeys(directories or (s.directory for s in discover())))
    return builds.prebuild_all(dirs, install, PROGRESS, "framework installs")
