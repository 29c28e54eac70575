"""Recipes that run: every fenced shell block of README.md and docs/*.md either runs as written, here, on the
session's demo-like world (its landing zone, warehouse and sites, as the demo's: site-a, site-b from 2024-03-01),
or is marked illustrative on the line before its fence, with the reason:

    <!-- illustrative: a deployment's host (sudo, /etc) -->

Illustrative blocks (a deployment's hosts and secrets, a hospital's own sites, the demo and the suite themselves)
are not run, but every `dagster asset materialize` and `dg launch` in any block is checked against the platform's
assets and partitions: a partitioned selection names its partitions (Dagster refuses one that does not, with a
stack trace), and keys of the demo's sites, dates and cohorts exist.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import SITES

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell", "console"}
MARK = re.compile(r"<!--\s*illustrative:\s*(\S.*?)\s*-->")


@dataclass(frozen=True)
class Block:
    file: str
    line: int
    text: str
    illustrative: str | None  # the reason given, or None: it runs

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        i = 0
        while i < len(lines):
            fence = re.match(r"^(\s*)```(\w*)\s*$", lines[i])
            if not fence:
                i += 1
                continue
            indent, language = fence.groups()
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            if language in SHELL:
                before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
                mark = MARK.search(before)
                body = "\n".join(line[len(indent):] for line in lines[i + 1:end])
                found.append(Block(doc.relative_to(REPO).as_posix(), i + 1, body, mark.group(1) if mark else None))
            i = end + 1
    return found


def commands(text: str) -> list[list[str]]:
    """The block's commands as argument lists (continuation lines joined, comments dropped)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            out.append(shlex.split(line, comments=True))
        except ValueError:
            continue
    return out


def test_every_shell_block_runs_or_says_why_it_is_illustrative():
    found = blocks()
    assert len(found) > 10
    unmarked = [b for b in found if b.illustrative is None]
    assert unmarked, "at least one recipe runs"
    for block in found:
        assert block.illustrative is None or len(block.illustrative) > 10, f"{block}: say why it is illustrative"


def test_every_materialize_command_names_partitions_that_exist():
    """`dagster asset materialize` and `dg launch` in every block, run or not: a partitioned selection names its
    partitions, and the demo's keys exist (docs/governance.md once ran published_cohort without --partition)."""
    from assets.partitions import COHORTS, PARTITIONS

    demo_sites = set(SITES)
    checked = 0
    for block in blocks():
        for argv in commands(block.text):
            tool = Path(argv[0]).name if argv else ""
            if tool == "dagster" and argv[1:3] == ["asset", "materialize"]:
                option = "--select"
            elif tool == "dg" and argv[1:2] == ["launch"]:
                option = "--assets"
            else:
                continue
            checked += 1
            selected = {a.rstrip("+") for a in argv[argv.index(option) + 1].split(",")}
            keys = [argv[argv.index(o) + 1] for o in ("--partition", "--partition-range") if o in argv]
            assert keys, f"{block}: {' '.join(argv)} selects partitioned assets and names no partition"
            definition = COHORTS if selected == {"published_cohort"} else PARTITIONS
            for key in (k for value in keys for k in value.split("...")):
                if definition is PARTITIONS and key.split("|")[-1] not in demo_sites:
                    continue  # a hospital's own site (north, south): the format only
                if definition is PARTITIONS:
                    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}\|[a-z0-9-]+", key), (str(block), key)
                assert definition.has_partition_key(key), (str(block), key)
    assert checked >= 8


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """Where the recipes run: the checkout's environment and configuration, beside scratch files."""
    folder = tmp_path_factory.mktemp("recipes")
    for name in (".venv", "platform", "definitions.py", "workspace.yaml", "pyproject.toml"):
        (folder / name).symlink_to(REPO / name)
    return folder


@pytest.mark.parametrize("block", [b for b in blocks() if b.illustrative is None], ids=str)
def test_a_recipe_runs_as_written_on_the_demo_like_world(block, warehouse, workdir, tmp_path):
    """On a copy of the session's world: a recipe may end a version or collect stored images, which the other
    tests of the world must not see (README's `imaging-versions withdraw amd-oct 1` once withdrew their release)."""
    import shutil

    copy = tmp_path / "warehouse"
    shutil.copytree(warehouse, copy, symlinks=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")} | {"IMAGING_WAREHOUSE": str(copy)}
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{block}:\n{block.text}\n--- stdout\n{result.stdout[-2000:]}\n" \
                                   f"--- stderr\n{result.stderr[-2000:]}"
