"""Reading the files under `platform/`: each file into the model its caller names, every problem of every
file gathered into one `ConfigError`.

Pure (no Spark, no Dagster), and it knows no file's meaning: each model lives with the domain that owns
its file (on `imaging.config_model.StrictModel`: unknown keys are errors, values are not coerced), and which
model reads which file is the caller's (`imaging/driver/platform_files.py` holds the map and
`load_platform()`, which `definitions.py` calls before it imports anything else). It imports nothing
from `imaging` but that leaf.

    quality = load_as(QualityFile, "quality.yaml")                   # one file -> the model given
    files = load_all({"issuers.yaml": IssuersFile, "cohorts/*.yaml": CohortFile})   # all errors at once

A `ConfigError` (a ValueError) lists every problem, one a line:

    platform/cohorts/amd_oct.yaml: version: missing (required)
    platform/cohorts/amd_oct.yaml: lateralities[0]: must be 'R', 'L', 'B' or 'U' (got 'X')

`dagster.yaml` and `dagster-production.yaml` are Dagster's instance files, validated by Dagster.
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml
from pydantic import BaseModel

from imaging.config_model import ConfigError, validate

__all__ = ["DEFAULT_PLATFORM_DIR", "PLATFORM_DIR", "REPO_ROOT", "ConfigError", "Check", "display", "load_all",
           "load_as", "model_for", "read_raw"]

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PLATFORM_DIR = REPO_ROOT / "platform"
# `platform/` holds configuration only; IMAGING_PLATFORM_DIR lets a deployment keep it elsewhere.
PLATFORM_DIR = Path(os.environ.get("IMAGING_PLATFORM_DIR", DEFAULT_PLATFORM_DIR))

# A rule across files: given every file found (name -> its model, None where the file itself is in error),
# it yields (file name, "field: problem") for each problem.
Check = Callable[[Mapping[str, Any]], Iterable[tuple[str, str]]]


def display(name: str, directory: str | Path | None = None) -> str:
    """How errors name a file: `platform/<name>` for the checkout's folder, else its full path."""
    directory = Path(directory or PLATFORM_DIR)
    if directory.resolve() == DEFAULT_PLATFORM_DIR.resolve():
        return f"platform/{name}"
    return str(directory / name)


def read_raw(name: str, directory: str | Path | None = None) -> Any:
    """The parsed content of a platform file (YAML or JSON; an empty YAML file is `{}`), unvalidated."""
    path = Path(directory or PLATFORM_DIR) / name
    shown = display(name, directory)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{shown}: file not found"]) from None
    try:
        if name.endswith(".json"):
            return json.loads(text)
        return copy.deepcopy(_parsed_yaml(text)) or {}
    except (yaml.YAMLError, json.JSONDecodeError) as error:
        detail = " ".join(str(error).split())
        raise ConfigError([f"{shown}: not valid {'JSON' if name.endswith('.json') else 'YAML'}: {detail}"]) from None


@functools.lru_cache(maxsize=64)
def _parsed_yaml(text: str) -> Any:
    """`yaml.safe_load` of `text`, by libyaml's parser where PyYAML has it (10x faster: a run reads the same
    files many times), remembered by content. A document it refuses is parsed again by the pure-Python
    parser, so an error names the fault as it always has."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)  # a safe loader: SafeLoader's constructor, libyaml's parser
    except yaml.YAMLError:
        return yaml.safe_load(text)


def load_as(model: type[BaseModel], name: str, directory: str | Path | None = None) -> Any:
    """One platform file (`quality.yaml`, `cohorts/amd_oct.yaml`, ...) as `model`, or a ConfigError."""
    return validate(model, read_raw(name, directory), display(name, directory))


def model_for(models: Mapping[str, type[BaseModel]], name: str) -> type[BaseModel]:
    """The model of a file in `models` (names, or patterns such as `cohorts/*.yaml`), by its path relative to
    the platform folder."""
    if name in models:
        return models[name]
    for pattern, model in models.items():
        if _is_pattern(pattern) and _fits(name, pattern):
            return model
    raise ValueError(f"no model for platform file {name!r}")


def load_all(models: Mapping[str, type[BaseModel]], directory: str | Path | None = None,
             checks: Iterable[Check] = ()) -> dict[str, Any]:
    """Every file `models` names, each as its model: a name (the file must exist), or a pattern such as
    `cohorts/*.yaml` (each file it matches, in name order; none is fine). Then each of `checks` across the
    files. One ConfigError lists every problem of every file; else {file name: model}."""
    root = Path(directory or PLATFORM_DIR)
    found: dict[str, Any] = {}
    problems: list[str] = []
    for key, model in models.items():
        for name in _matches(key, root) if _is_pattern(key) else [key]:
            try:
                found[name] = load_as(model, name, root)
            except ConfigError as error:
                problems += error.problems
                found[name] = None
    for check in checks:
        problems += [f"{display(name, root)}: {problem}" for name, problem in check(found)]
    if problems:
        raise ConfigError(problems)
    return found


def _is_pattern(key: str) -> bool:
    return any(c in key for c in "*?[")


def _fits(name: str, pattern: str) -> bool:
    """Whether a file name fits a pattern part by part (`*` never crosses a `/`)."""
    parts, wanted = name.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted))


def _matches(pattern: str, root: Path) -> list[str]:
    """The files of `root` a pattern (`folder/*.suffix`, one level) names, relative to it, in name order."""
    return sorted(path.relative_to(root).as_posix() for path in root.glob(pattern) if path.is_file())
