"""Content-addressed release bundles: a sha256 manifest of every file, and the release id it gives.

A bundle is a folder. `SHA256SUMS` lists every other file in it (`sha256sum -c` format, sorted by
path); the release id is the sha256 of `SHA256SUMS` itself, so it names the exact bytes of every
file, and `sha256sum SHA256SUMS` recomputes it with nothing but coreutils. No file inside the
bundle can state the id (that would be circular): it is the folder name of a held release, the key
of its approval, and what `imaging-review` prints.

One file is allowed beside the content without being listed: `APPROVAL.json`, the copy of the
approval a published release carries. It is about the content, not part of it, and it names the
release id it approves, so it is checked against the manifest rather than by it.

Pure apart from reading and writing the bundle's own files (through fsspec, so local or gs://).
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from typing import Iterable, Mapping

from imaging import fs as fsx

SUMS_FILE = "SHA256SUMS"
APPROVAL = "APPROVAL.json"
UNLISTED = frozenset({SUMS_FILE, APPROVAL})
# What the research data is, as opposed to the description of it: the data digest covers these.
DATA_PREFIXES = ("images/", "metadata.")


@dataclass(frozen=True)
class ManifestEntry:
    """One line of SHA256SUMS: a file's path inside the bundle and its sha256."""

    path: str
    sha256: str


@dataclass(frozen=True)
class BundleCheck:
    """The outcome of verifying a bundle (or one file of it) against its manifest."""

    root: str
    release_id: str | None  # None when there is no readable manifest
    problems: tuple[str, ...]  # empty when everything verified
    checked: int  # files whose checksum was recomputed
    listed: int  # files the manifest lists
    trusted: int = 0  # files not hashed again: their identity is the one they had when last hashed

    @property
    def ok(self) -> bool:
        return self.release_id is not None and not self.problems


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(entries: Iterable[ManifestEntry]) -> bytes:
    """SHA256SUMS text: `<sha256>  <path>` per file, sorted by path (byte order), one newline each."""
    entries = sorted(entries, key=lambda e: e.path.encode())
    paths = [e.path for e in entries]
    if len(paths) != len(set(paths)):
        raise ValueError("a path is listed twice")
    for e in entries:
        if "\n" in e.path or e.path.startswith("/") or ".." in e.path.split("/") or e.path in UNLISTED:
            raise ValueError("a manifest path must be relative, inside the bundle, on one line")
        if len(e.sha256) != 64 or any(c not in "0123456789abcdef" for c in e.sha256):
            raise ValueError("a manifest checksum must be 64 lower-case hex digits")
    return "".join(f"{e.sha256}  {e.path}\n" for e in entries).encode()


def parse_manifest(data: bytes) -> list[ManifestEntry]:
    entries = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        digest, sep, path = line.partition("  ")
        if not sep or len(digest) != 64:
            raise ValueError(f"{SUMS_FILE} line {number} is not '<sha256>  <path>'")
        entries.append(ManifestEntry(path, digest))
    return entries


def release_id(manifest: bytes) -> str:
    """The release id: the sha256 of the manifest's bytes."""
    return sha256_bytes(manifest)


def data_digest(entries: Iterable[ManifestEntry]) -> str:
    """sha256 over the manifest lines of the research data only (images and metadata).

    It stays the same when only the description (data card, lineage, release.json) changes, e.g.
    after a code change that did not change a byte of the data.
    """
    return sha256_bytes(manifest_bytes(e for e in entries if e.path.startswith(DATA_PREFIXES)))


def bundle_files(root: str) -> list[str]:
    """Every file's path relative to `root` (sorted), SHA256SUMS and APPROVAL.json included."""
    fs, base = fsx.filesystem(root)
    base = base.rstrip("/")
    if not fs.exists(base):
        return []
    return sorted(p[len(base) + 1:] for p in fs.find(base))


def hash_files(root: str, known: Mapping[str, str] | None = None) -> list[ManifestEntry]:
    """A manifest entry for every file under `root` but the unlisted ones.

    `known` maps paths to checksums computed while the files were written (e.g. by the Spark copy
    that verified each image): those are not read again. A known path that is not there is an error.
    """
    known = dict(known or {})
    present = [p for p in bundle_files(root) if p not in UNLISTED]
    missing = sorted(set(known) - set(present))
    if missing:
        raise ValueError(f"{len(missing)} files said to be written are not in the bundle")
    return [ManifestEntry(p, known.get(p) or fsx.sha256_url(f"{root}/{p}")) for p in present]


@dataclass(frozen=True)
class Manifest:
    """A bundle's SHA256SUMS: its bytes (their sha256 is the release id) and the entries they list."""

    data: bytes
    entries: list[ManifestEntry]


def read_manifest(root: str) -> Manifest:
    with fsx.open_read(f"{root}/{SUMS_FILE}") as handle:
        data = handle.read()
    return Manifest(data=data, entries=parse_manifest(data))


def verify_bundle(root: str, only: str | None = None, trusted: Mapping[str, str] | None = None) -> BundleCheck:
    """Check a bundle: every listed file present with its checksum, nothing unlisted.

    `only` (a path inside the bundle) checks that one file and the bundle's small description files
    instead of every image: how a reviewer checks one published file without reading a whole
    release. Listing (nothing missing, nothing unlisted) is checked either way.

    `trusted` (path -> identity, imaging.steps.objects.identity) names files hashed moments ago by the run that
    placed them (the release copy): one whose identity is still that one (same inode, size and modification
    time; on an object store, size and generation) is not read again, any other is. imaging-review passes
    none: it reads every byte.
    """
    try:
        listed = read_manifest(root)
    except FileNotFoundError:
        return BundleCheck(root, None, (f"no {SUMS_FILE}: not a release bundle",), 0, 0)
    except (ValueError, UnicodeDecodeError) as error:
        return BundleCheck(root, None, (f"unreadable {SUMS_FILE}: {error}",), 0, 0)
    expected = {e.path: e.sha256 for e in listed.entries}
    present = {p for p in bundle_files(root) if p not in UNLISTED}
    problems = [f"not listed: {p}" for p in sorted(present - set(expected))]
    problems += [f"missing: {p}" for p in sorted(set(expected) - present)]
    if only is not None and only not in expected:
        problems.append(f"not listed: {only}")
    to_check = sorted(set(expected) & present)
    if only is not None:
        to_check = [p for p in to_check if p == only or not p.startswith("images/")]
    hashed = [p for p in to_check if not _unchanged(f"{root}/{p}", (trusted or {}).get(p))]
    problems += [f"checksum differs: {p}" for p in hashed if fsx.sha256_url(f"{root}/{p}") != expected[p]]
    return BundleCheck(root, release_id(listed.data), tuple(problems), len(hashed), len(expected),
                       len(to_check) - len(hashed))


def _unchanged(url: str, sealed: str | None) -> bool:
    """Whether a file's identity is still `sealed`, the one it had when it was hashed."""
    from imaging.steps.objects import identity

    return sealed is not None and identity(url) == sealed


@dataclass(frozen=True)
class BundleLocation:
    """Where a path is in a release bundle: the bundle's root, and the file inside it (None: the bundle)."""

    root: str
    inner: str | None


def find_bundle_root(path: str) -> BundleLocation:
    """The bundle a bundle folder or any file in one belongs to, and the file's path inside it."""
    fs, local = fsx.filesystem(path)
    local = local.rstrip("/")
    start = local if fs.isdir(local) else posixpath.dirname(local)
    current = start
    while True:
        if fs.exists(f"{current}/{SUMS_FILE}"):
            inner = None if current == local else local[len(current) + 1:]
            return BundleLocation(root=fsx.qualify(fs, current), inner=inner)
        parent = posixpath.dirname(current)
        if parent == current or not parent:
            raise FileNotFoundError(f"no {SUMS_FILE} in {path} or any folder above it")
        current = parent


def content_key_of(root: str) -> str | None:
    """The content key of a bundle: the checksum its manifest lists for release.json (None if absent).

    release.json holds the data digest, selection, options and code versions but no run facts, so
    two builds of the same data under the same code share it even when their inputs' runs differ.
    """
    try:
        entries = read_manifest(root).entries
    except (FileNotFoundError, ValueError):
        return None
    return next((e.sha256 for e in entries if e.path == "release.json"), None)


def verify_release(root: str, trusted: Mapping[str, str] | None = None) -> list[str]:
    """Problems found checking a release folder against its SHA256SUMS (empty when it verifies): every
    file listed with its checksum, nothing unlisted but SHA256SUMS and the approval copy (`trusted`: see
    `verify_bundle`)."""
    return list(verify_bundle(root, trusted=trusted).problems)
