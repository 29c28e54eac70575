"""Code versions derived from what decides an asset's output, never bumped by hand.

An asset's code version is a short hash of: the source files of the modules that compute it (and
any data files they ship, e.g. Table E.1-1), the de-identification options, and the clinical
policy as parsed (so a comment edit changes nothing, a changed action changes the version). Dagster
then marks the asset stale when any of them changes, and provenance names the exact version.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Iterable, Mapping

_DATA_SUFFIXES = (".py", ".json", ".yaml", ".yml")
_REPO = Path(__file__).resolve().parents[2]


def module_files(*modules: str) -> list[Path]:
    """Source files of modules; a package brings every .py and data file below it."""
    files: set[Path] = set()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ValueError(f"no module {name!r}")
        origin = Path(spec.origin)
        if spec.submodule_search_locations:  # a package
            for folder in spec.submodule_search_locations:
                files |= {p for p in Path(folder).rglob("*")
                          if p.is_file() and p.suffix in _DATA_SUFFIXES and "__pycache__" not in p.parts}
        else:
            files.add(origin)
    return sorted(files)


def code_version(files: Iterable[Path], deid_options: Iterable[str] = (), policy: Mapping | None = None,
                 root: Path | None = None) -> str:
    """sha256 (first 16 hex digits) over the files (path relative to `root`, bytes), options and policy."""
    digest = hashlib.sha256()
    root = (root or _REPO).resolve()
    for path in sorted(Path(p).resolve() for p in files):
        # Relative names, so the same checkout gives the same version wherever it is.
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.as_posix()
        data = path.read_bytes()
        digest.update(f"file\x1f{name}\x1f{len(data)}\x1f".encode())
        digest.update(data)
    digest.update(("options\x1f" + ",".join(sorted(deid_options))).encode())
    digest.update(("policy\x1f" + json.dumps(policy or {}, sort_keys=True, default=str)).encode())
    return digest.hexdigest()[:16]
