"""File access through fsspec, so the same code reads local paths and gs:// URLs.

Filesystems are cached by fsspec per process, so asking for one per Spark partition costs
nothing after the first; callers still take one per partition, never one per record.
"""

from __future__ import annotations

import fsspec
from fsspec.core import url_to_fs


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem for `url` and the path within it."""
    return url_to_fs(url)


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
    fs, src_path = filesystem(src)
    _, dst_path = filesystem(dst)
    fs.makedirs(fs._parent(dst_path), exist_ok=True)
    fs.mv(src_path, dst_path, recursive=True)


def write_bytes(url: str, data: bytes) -> None:
    fs, path = filesystem(url)
    fs.makedirs(fs._parent(path), exist_ok=True)
    with fs.open(path, "wb") as handle:
        handle.write(data)


def read_bytes(url: str) -> bytes:
    fs, path = filesystem(url)
    with fs.open(path, "rb") as handle:
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
        fs.mv(src_path, dst_path)
        return
    for entry in fs.find(src_path):
        target = dst_path + entry[len(src_path):]
        fs.makedirs(fs._parent(target), exist_ok=True)
        fs.mv(entry, target)
    fs.rm(src_path, recursive=True) if fs.exists(src_path) else None


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")
