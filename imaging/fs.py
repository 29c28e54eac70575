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
