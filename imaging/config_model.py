"""What every configuration model shares: the strict base model, the shared field types, `ConfigError`, and
pydantic's errors turned into lines that name the file and the field.

A leaf: it imports nothing from `imaging`. Each domain module that owns a file under `platform/` defines that
file's model on `StrictModel` beside the constants it checks against (`imaging.steps.clinical`,
`imaging.quality.rules`, ...); `imaging.config_files` reads the files and hands each to its model, and
`imaging.driver.platform_files` says which model reads which file. A module that owns a model never loads
its own file: its caller loads it and builds the domain object `from_model`.

    from imaging.config_model import StrictModel, Text, validate

    class CohortFile(StrictModel):
        name: Text

    validate(CohortFile, {"name": ""}, "platform/cohorts/x.yaml")
    # ConfigError: platform/cohorts/x.yaml: name: must not be empty
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, RootModel, StringConstraints, ValidationError

SITE_KEY = r"^[A-Za-z0-9_-]+$"

Text = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]  # not empty, not only blanks
SiteKey = Annotated[str, StringConstraints(pattern=SITE_KEY)]
PositiveInt = Annotated[int, Field(ge=1)]


class ConfigError(ValueError):
    """A configuration file that cannot be used: every problem, each naming the file and the field."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            super().__init__(f"{len(self.problems)} problems in the platform configuration:\n"
                             + "\n".join(f"  {p}" for p in self.problems))


class SecretInputError(ValueError):
    """A validator's error about a value that may hold a secret (a URL with a password): the message never repeats
    the value, as other errors do."""


class StrictModel(BaseModel):
    """Unknown keys are errors; values are not coerced (a quoted number is not a number)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def validate(model: type[BaseModel], data: Any, source: str) -> Any:
    """`data` as `model`, or a ConfigError naming `source` and every field in error."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError([f"{source}: {line}" for line in describe(error, model)]) from None


# --- pydantic's errors, readably ---------------------------------------------------------------------------

def describe(error: ValidationError, model: type[BaseModel] | None = None) -> list[str]:
    """`path: what is wrong and what is allowed`, one line per error of a ValidationError."""
    lines = []
    for item in error.errors(include_url=False):
        loc = list(item["loc"])
        key_error = bool(loc) and loc[-1] == "[key]"
        if key_error:
            loc.pop()
        path = _path(loc) or "(the file)"
        lines.append(f"{path}: {_message(item, model, loc, key_error)}")
    return lines


def _path(loc) -> str:
    text = ""
    for step in loc:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(item: dict, model, loc, key_error: bool) -> str:
    kind, ctx = item["type"], item.get("ctx") or {}
    got = f" (got {_shown(item['input'])})" if "input" in item else ""
    if kind == "missing":
        return "missing (required)"
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, loc[:-1]) if model is not None else None
        return "unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    if key_error:
        prefix = "key "
    else:
        prefix = ""
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"{prefix}must be a whole number{got}"
    if kind in ("float_type", "float_parsing"):
        return f"{prefix}must be a number{got}"
    if kind == "string_type":
        return f"{prefix}must be a string (quote it in YAML){got}"
    if kind == "bool_type":
        return f"{prefix}must be true or false{got}"
    if kind in ("list_type", "tuple_type"):
        return f"{prefix}must be a list{got}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"{prefix}must be a mapping of key: value{got}"
    if kind == "string_pattern_mismatch":
        return f"{prefix}must match {ctx.get('pattern')}{got}"
    if kind == "string_too_short":
        return f"{prefix}must not be empty"
    if kind == "value_error":
        shown = "" if isinstance(ctx.get("error"), SecretInputError) or not loc else got
        return f"{prefix}{str(ctx.get('error', item['msg']))}{shown}"
    message = item["msg"].replace("Input should be", "must be").replace("Value error, ", "")
    message = message.replace("greater than or equal to", ">=").replace("less than or equal to", "<=")
    message = message.replace("greater than", ">").replace("less than", "<")
    return f"{prefix}{message}{got}"


def _allowed_keys(model, loc) -> list[str] | None:
    """The keys a mapping at `loc` of `model` may have (a model's fields), for an unknown-key error."""
    kind: Any = model
    for step in loc:
        kind = _inner(kind, step)
        if kind is None:
            return None
    kind = _unwrap(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel) and not issubclass(kind, RootModel):
        return [field.alias or name for name, field in kind.model_fields.items()]
    return None


def _unwrap(kind):
    """The type under Annotated[...] and `X | None`."""
    while True:
        origin = typing.get_origin(kind)
        if origin is Annotated:
            kind = typing.get_args(kind)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(kind) if a is not type(None)]
            if len(args) != 1:
                return kind
            kind = args[0]
        else:
            return kind


def _inner(kind, step):
    """The type one step (a field name, a list index, a mapping key) inside `kind`."""
    kind = _unwrap(kind)
    if isinstance(kind, type) and issubclass(kind, RootModel):
        kind = kind.model_fields["root"].annotation
        kind = _unwrap(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        field = kind.model_fields.get(step) or next(
            (f for f in kind.model_fields.values() if f.alias == step), None)
        return field.annotation if field is not None else None
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (list, tuple) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None
