"""The release object store: each distinct released image once, named by its sha256, that versions share.

`<warehouse>/deidentified/release_objects/<ab>/<sha256>.dcm` (`ab`: the first two hex digits), read-only. A
release copy writes a new image into the store (under a temporary name, then under its sha256: an object's
name is its content, so two writers of the same bytes meet at one name) and places it in the version folder:

- on a POSIX warehouse, a **hard link**: the version's file and the object are one inode, so each distinct
  content is stored once however many versions hold it, deleting a version (or the object) never touches the
  others, and every link is read-only (0444) because the inode is;
- on an object store (gs://), a **server-side copy**: the version folder stays self-contained (a researcher
  copies it whole), no byte passes through the platform, and the bucket bills each copy's storage (GCS has no
  links).

Where no hard link can be made (the zones on different filesystems) the file is copied.

A file's **identity** is what says it has not changed since it was hashed, without reading it: locally its
device, inode, size and modification time; on an object store its size and generation (a new write is a new
generation). The index of the store (`<warehouse>/deidentified/release_objects/_index/`, written by
published_cohort) records, per content key, the object and its identity when it was last hashed: an object
whose identity differs is hashed again before it is shared, and one that no longer hashes to its name is a
tampered object, never shared. Pure: fsspec through `imaging.fs`, no Spark.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from dataclasses import dataclass

from imaging import fs as fsx

INCOMING = "_incoming"  # new objects while they are written (a dead writer's leftovers are removed by `gc`)
INDEX = "_index"  # the content key index, a table partitioned by cohort
READ_ONLY = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH


class TamperedObject(RuntimeError):
    """A stored object whose bytes no longer hash to its name: never shared (its versions fail their review)."""


def _local(url: str) -> str | None:
    """The local path of `url`, or None when it names an object store (`gs://...`). (No filesystem is looked up
    for a local path: this runs once or twice per released image.)"""
    if "://" not in url:
        return url
    return url[len("file://"):] if url.startswith("file://") else None


def identity(url: str) -> str | None:
    """A file's identity (see the module docstring); None when it does not exist."""
    path = _local(url)
    if path is not None:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
    fs, path = fsx.filesystem(url)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        return None
    marker = info.get("generation") or info.get("etag") or info.get("md5Hash") or info.get("mtime") or ""
    return f"{info.get('size')}:{marker}"


@dataclass(frozen=True)
class ObjectStore:
    """The store under `root` (`<warehouse>/deidentified/release_objects`)."""

    root: str

    def url(self, sha256: str) -> str:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ValueError("an object is named by a sha256 (64 lower-case hex digits)")
        return f"{self.root}/{sha256[:2]}/{sha256}.dcm"

    def incoming(self) -> str:
        """A fresh temporary name to write a new object under."""
        return f"{self.root}/{INCOMING}/{uuid.uuid4().hex}.dcm"

    def store(self, temporary: str, sha256: str) -> str:
        """Keep the written file `temporary` (its bytes hash to `sha256`) as the object `sha256`, read-only;
        returns the object's URL. When the object exists already (the same bytes written before), it is
        kept if it still hashes to its name and the new copy is dropped; one that does not is a TamperedObject."""
        target = self.url(sha256)
        fs, path = fsx.filesystem(target)
        _, temp = fsx.filesystem(temporary)
        if fsx.is_local(fs):
            os.chmod(temp, READ_ONLY)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                os.link(temp, path)  # never replaces: the first writer of a content keeps its name
            except FileExistsError:
                self.check(sha256)
            os.unlink(temp)
            return target
        if fs.exists(path):
            self.check(sha256)
            fs.rm(temp)
        else:
            fsx.relocate(fs, temp, path)
        return target

    def check(self, sha256: str) -> str:
        """The object's identity after hashing it: a TamperedObject when its bytes are not its name."""
        url = self.url(sha256)
        if fsx.sha256_url(url) != sha256:
            raise TamperedObject(f"release object {sha256[:16]}... no longer hashes to its name: it was changed "
                                 f"after it was written; every version holding it fails imaging-review")
        return identity(url)

    def trusted(self, sha256: str, sealed: str | None) -> str | None:
        """The object's identity if it can be shared: unchanged since it was hashed (`sealed`), or hashed again
        now and found whole. None when it is gone (the index is a hint: the image is written anew)."""
        now = identity(self.url(sha256))
        if now is None or now == sealed:
            return now
        return self.check(sha256)

    def place(self, sha256: str, target: str) -> None:
        """Put the object at `target` (a version's file): a hard link, or a server-side copy (see the docstring)."""
        source = self.url(sha256)
        src, dst = _local(source), _local(target)
        if src is None or dst is None:
            fs, src = fsx.filesystem(source)
            _, dst = fsx.filesystem(target)
            fs.makedirs(fs._parent(dst), exist_ok=True)
            fs.copy(src, dst)
            return
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.lexists(dst):  # a retried task placed it already
            os.unlink(dst)
        try:
            os.link(src, dst)
        except OSError as error:
            if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise
            shutil.copyfile(src, dst)
            os.chmod(dst, READ_ONLY)


def link_tree(source: str, target: str) -> None:
    """A folder's copy at `target` whose files share their bytes with `source`'s: hard links locally (falling
    back to copies), server-side copies on an object store. How a held release is published while the held
    copy stays until the commit succeeds, without writing its images again."""
    fs, src = fsx.filesystem(source)
    _, dst = fsx.filesystem(target)
    if not fsx.is_local(fs):
        fs.makedirs(fs._parent(dst), exist_ok=True)
        fs.copy(src, dst, recursive=True)
        return
    for folder, _, names in os.walk(src):
        into = os.path.join(dst, os.path.relpath(folder, src))
        os.makedirs(into, exist_ok=True)
        for name in names:
            try:
                os.link(os.path.join(folder, name), os.path.join(into, name))
            except OSError as error:
                if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                    raise
                shutil.copy2(os.path.join(folder, name), os.path.join(into, name))
