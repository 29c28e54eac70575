"""The code archive the executors get (resources/spark.py `code_archive`): it holds no driver-only
module, and every module in it imports from the archive alone (no repo root, no editable install), so
no executor step reaches into `imaging.governance`. Pure: no Spark session."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile

from resources.spark import DRIVER_ONLY, code_archive

EXECUTOR_STEPS = ("imaging.steps.index", "imaging.steps.clinical", "imaging.steps.anonymize",
                  "imaging.steps.release", "imaging.header", "imaging.quality.files", "imaging.records")


def _modules(names: list[str]) -> list[str]:
    return sorted(n[:-len("/__init__.py")].replace("/", ".") if n.endswith("/__init__.py")
                  else n[:-3].replace("/", ".") for n in names if n.endswith(".py"))


def test_archive_leaves_out_the_driver_only_packages():
    names = zipfile.ZipFile(code_archive()).namelist()
    shipped = _modules(names)
    assert not [m for m in shipped for p in DRIVER_ONLY if m == f"imaging.{p}" or m.startswith(f"imaging.{p}.")]
    assert not [n for n in names if n.startswith(tuple(f"imaging/{p.replace('.', '/')}/" for p in DRIVER_ONLY))]
    assert {"imaging.pacs.retrieval", "imaging.pacs.dimse"} <= set(shipped)  # the PACS retrievals run there
    for step in EXECUTOR_STEPS:
        assert step in _modules(names)
    assert "imaging/deid/data/" in {n.rsplit("/", 1)[0] + "/" for n in names}  # the profile's data ships


def test_no_shipped_module_imports_a_driver_only_package():
    """Lazy imports too (inside functions), which importing the modules would not reach."""
    archive = zipfile.ZipFile(code_archive())
    forbidden = tuple(f"imaging.{p}" for p in DRIVER_ONLY)
    found = []
    for name in archive.namelist():
        if not name.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(archive.read(name))):
            targets = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                       else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if isinstance(node, ast.ImportFrom) and node.module:  # `from imaging.pacs import receive` too
                targets += [f"{node.module}.{a.name}" for a in node.names]
            found += [f"{name}: {t}" for t in targets
                      if any(t == f or t.startswith(f + ".") for f in forbidden)]
    assert found == []


def test_every_shipped_module_imports_from_the_archive_alone(tmp_path):
    archive = code_archive()
    modules = _modules(zipfile.ZipFile(archive).namelist())
    script = f"""
import importlib, json, sys
# what an executor has: site-packages and the archive; never the repo root nor the project's editable install
sys.meta_path[:] = [f for f in sys.meta_path if not type(f).__module__.startswith("__editable__")]
sys.path[:] = [{archive!r}] + [p for p in sys.path if "site-packages" in p or "lib/python" in p]
loaded = {{}}
for name in {modules!r}:
    loaded[name] = importlib.import_module(name).__file__
print(json.dumps({{"files": loaded, "imaging": sorted(m for m in sys.modules if m.startswith("imaging"))}}))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(path.startswith(archive) for path in result["files"].values()), result["files"]
    # Bytecode shipped beside the source: a new Python worker does not compile the package again.
    assert all(path.endswith(".pyc") for path in result["files"].values()), result["files"]
    assert not [m for m in result["imaging"] for p in DRIVER_ONLY if m == f"imaging.{p}" or m.startswith(f"imaging.{p}.")]
    assert set(EXECUTOR_STEPS) <= set(result["files"])
