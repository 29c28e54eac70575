"""File access through fsspec, so the same code reads local paths and gs:// URLs.

Filesystems are cached by fsspec per process, so asking for one per Spark partition costs
nothing after the first; callers still take one per partition, never one per record.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil

import fsspec
from fsspec.core import url_to_fs

# Google Cloud Storage (gs://) is gcsfs, with credentials from the environment: application default
# credentials (a VM's or pod's service account, or GOOGLE_APPLICATION_CREDENTIALS), project from
# GOOGLE_CLOUD_PROJECT. STORAGE_EMULATOR_HOST points gcsfs at an emulator with no credentials; gcsfs
# then must not probe each bucket over gRPC first (an emulator never answers: 60 s per call). gcsfs
# reads this setting when it is imported, which fsspec does lazily, after this module.
if os.environ.get("STORAGE_EMULATOR_HOST"):
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem for `url` and the path within it (a plain local path without fsspec's URL parsing: it is
    asked for several times a file)."""
    if "://" not in url and not url.startswith(("file:", "local:")):
        fs = _local()
        return fs, fs._strip_protocol(url)
    return url_to_fs(url)


@functools.lru_cache(maxsize=1)
def _local() -> fsspec.AbstractFileSystem:
    from fsspec.implementations.local import LocalFileSystem

    return LocalFileSystem()


def qualify(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """A path as a URL again (gs://bucket/x), or unchanged for local files."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return path if protocol in ("file", "local") else f"{protocol}://{path}"


def list_files(url: str) -> list[tuple[str, int]]:
    """Every file below `url` at any depth, as (url, size), sorted; empty if it does not exist."""
    fs, root = filesystem(url)
    if not fs.exists(root):
        return []
    found = fs.find(root, detail=True)
    return sorted((qualify(fs, p), int(info.get("size") or 0)) for p, info in found.items() if info.get("type") == "file")


def parquet_table(url: str):
    """The hive-partitioned Parquet table at `url` as a pyarrow dataset (read by streaming scans); None when it has
    no row to read: the folder missing, or only partition folders an empty site-day's run emptied (no file, and so
    no schema)."""
    import pyarrow.dataset as ds

    fs, path = filesystem(url)
    if not fs.exists(path):
        return None
    dataset = ds.dataset(path, format="parquet", partitioning="hive", filesystem=fs)
    return dataset if dataset.files else None


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    return fs.exists(path)


def remove(url: str) -> None:
    fs, path = filesystem(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)


def remove_empty(url: str) -> None:
    """Remove a folder if it exists and holds nothing (object stores have no empty folders)."""
    fs, path = filesystem(url)
    if _is_local(fs) and fs.isdir(path) and not fs.ls(path, detail=False):
        fs.rmdir(path)


def move(src: str, dst: str) -> None:
    """Move a file or folder; between two stores (a local Spark scratch to gs://) by copy and delete."""
    fs, src_path = filesystem(src)
    dst_fs, dst_path = filesystem(dst)
    if _same_store(fs, dst_fs) and _is_local(fs):
        fs.makedirs(fs._parent(dst_path), exist_ok=True)
        fs.mv(src_path, dst_path, recursive=True)
        return
    if _same_store(fs, dst_fs):
        move_tree(src, dst)
        return
    sources = [src_path] if fs.isfile(src_path) else fs.find(src_path)
    for entry in sources:
        target = dst_path + entry[len(src_path):]
        dst_fs.makedirs(dst_fs._parent(target), exist_ok=True)
        with fs.open(entry, "rb") as reader, dst_fs.open(target, "wb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
    fs.rm(src_path, recursive=True)


class OutsideRoot(ValueError):
    """A path that is not a plain descendant of the folder it must stay in (the message names no value)."""


# One segment of a path the platform writes below a root: starts with a letter or digit (no `.`, `..`,
# hidden names, empty segments or absolute paths), then letters, digits, `.`, `_`, `=` and `-` only.
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=-]{0,199}")


def under(root: str, relative: str) -> str:
    """`root/relative`, or OutsideRoot when `relative` could name anything outside `root`.

    Every segment must be a plain name (`_SEGMENT`); locally, where a symbolic link could lead
    elsewhere, the real path of the nearest existing folder must also lie inside the real root.
    """
    segments = relative.split("/")
    if not all(_SEGMENT.fullmatch(s) for s in segments):
        raise OutsideRoot("refused a path that is not a plain descendant of its root")
    url = f"{root.rstrip('/')}/{relative}"
    fs, path = filesystem(url)
    if _is_local(fs):
        base = os.path.realpath(filesystem(root)[1])
        existing = os.path.dirname(path)
        while not os.path.exists(existing) and existing != os.path.dirname(existing):
            existing = os.path.dirname(existing)
        if os.path.commonpath([base, os.path.realpath(existing)]) != base and os.path.exists(base):
            raise OutsideRoot("refused a path that resolves outside its root")
    return url


def write_under(root: str, relative: str, data: bytes) -> str:
    """Write `data` at `root/relative`, refusing any `relative` that could leave `root` (see `under`)."""
    url = under(root, relative)
    write_bytes(url, data)
    return url


def write_bytes(url: str, data: bytes) -> None:
    fs, path = filesystem(url)
    fs.makedirs(fs._parent(path), exist_ok=True)
    with fs.open(path, "wb") as handle:
        handle.write(data)


def open_read(url: str):
    """`url` open for reading (binary). On GCS with gcsfs's plain read-ahead cache: its default ("adaptive",
    a background prefetcher) was seen to hang for good under the many small reads of pydicom reading a
    header over the GCS emulator."""
    fs, path = filesystem(url)
    if _is_local(fs):
        return open(path, "rb")  # the file itself: every read of a header would go through fsspec's wrapper
    return fs.open(path, "rb", cache_type="readahead")


def read_bytes(url: str) -> bytes:
    with open_read(url) as handle:
        return handle.read()


def write_atomic(url: str, data: bytes) -> None:
    """Write a small file so that readers see the old content or the new, never a part.

    Local files are written beside the target and renamed over it (atomic on POSIX); an object
    store writes each object whole, so a direct write is already atomic there.
    """
    fs, path = filesystem(url)
    fs.makedirs(fs._parent(path), exist_ok=True)
    if not _is_local(fs):
        with fs.open(path, "wb") as handle:
            handle.write(data)
        return
    temp = f"{path}.tmp"
    with fs.open(temp, "wb") as handle:
        handle.write(data)
    fs.mv(temp, path)


def move_tree(src: str, dst: str) -> None:
    """Move a folder (or file) to `dst`; safe to repeat after an interruption.

    Locally a rename, which is atomic. On an object store a folder move is many copies, so an
    interrupted move leaves part in each place: repeating it moves what is left (overwriting
    what was already copied) and removes the source.
    """
    fs, src_path = filesystem(src)
    _, dst_path = filesystem(dst)
    if not fs.exists(src_path):
        return
    if _is_local(fs) and not fs.exists(dst_path):
        fs.makedirs(fs._parent(dst_path), exist_ok=True)
        fs.mv(src_path, dst_path, recursive=True)
        return
    if fs.isfile(src_path):
        fs.makedirs(fs._parent(dst_path), exist_ok=True)
        relocate(fs, src_path, dst_path)
        return
    for entry in fs.find(src_path):
        target = dst_path + entry[len(src_path):]
        fs.makedirs(fs._parent(target), exist_ok=True)
        relocate(fs, entry, target)
    fs.rm(src_path, recursive=True) if fs.exists(src_path) else None


def relocate(fs: fsspec.AbstractFileSystem, src_path: str, dst_path: str) -> None:
    """Move one file within a filesystem: a rename locally, a server-side copy then a delete on an
    object store. (gcsfs's `mv` first tries GCS's newer move API, which emulators answer with 501
    after a minute of retries per object; copy + delete is what a move is on a flat bucket anyway.)"""
    if _is_local(fs):
        fs.mv(src_path, dst_path)
    else:
        fs.copy(src_path, dst_path)
        fs.rm(src_path)


def _same_store(a: fsspec.AbstractFileSystem, b: fsspec.AbstractFileSystem) -> bool:
    protocol = lambda fs: fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]  # noqa: E731
    return protocol(a) == protocol(b)


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return _is_local(fs)


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def sha256_url(url: str) -> str:
    """The sha256 of a file, streamed (the one file hash of the platform: releases, checks, review)."""
    digest = hashlib.sha256()
    with open_read(url) as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class HashingReader:
    """A binary file read through, its sha256 computed over every byte in order, each byte once.

    Reads may seek back (a parser peeking ahead): bytes already hashed are not hashed again. A seek
    forward past bytes never read leaves a gap, which the next read hashes first (read in chunks, so
    a skipped value costs no memory). `finish()` hashes what is left to the end and gives the digest.
    """

    CHUNK = 4 << 20

    def __init__(self, raw):
        self._raw = raw
        self._digest = hashlib.sha256()
        self._hashed = 0
        self._pos = raw.tell()

    def read(self, size: int | None = -1) -> bytes:
        if self._pos > self._hashed:
            self._fill(self._pos)
        data = self._raw.read(size)
        end = self._pos + len(data)
        if end > self._hashed:
            self._digest.update(memoryview(data)[self._hashed - self._pos:])
            self._hashed = end
        self._pos = end
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = self._raw.seek(offset, whence)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def _fill(self, upto: int) -> None:
        self._raw.seek(self._hashed)
        while self._hashed < upto:
            chunk = self._raw.read(min(self.CHUNK, upto - self._hashed))
            if not chunk:
                break
            self._digest.update(chunk)
            self._hashed += len(chunk)
        self._raw.seek(self._pos)

    def finish(self) -> str:
        """The sha256 of the whole file (what was not read yet is read now, and hashed)."""
        self._raw.seek(self._hashed)
        while chunk := self._raw.read(self.CHUNK):
            self._digest.update(chunk)
            self._hashed += len(chunk)
        self._raw.seek(self._pos)
        return self._digest.hexdigest()


class HashingWriter:
    """A binary file written through, its sha256 and size computed on the way."""

    def __init__(self, raw):
        self._raw = raw
        self._digest = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        self._raw.write(data)
        self._digest.update(data)
        self.size += len(data)
        return len(data)

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def open_write_under(root: str, relative: str):
    """`root/relative` open for writing (binary), refusing any `relative` that could leave `root` (see `under`)."""
    return open_write(under(root, relative))


def open_write(url: str):
    """`url` open for writing (binary), its folder made if missing (a URL `under` has checked)."""
    fs, path = filesystem(url)
    fs.makedirs(fs._parent(path), exist_ok=True)
    if _is_local(fs):
        return open(path, "wb")
    return fs.open(path, "wb")
