"""Every file under `platform/` the platform reads, as a pydantic model, and the one loader of them.

Pure (no Spark, no Dagster): `definitions.py` calls `load_platform()` before it imports anything
else, so a mistake in any file stops the code location at load, naming the file and the field,
before a Spark session could start. Each model forbids unknown keys and does not coerce types
(`"8"` is not an integer, `8` is not a string), and carries the domain's constraints.

    files = load_platform()                       # every file, all errors of all files at once
    cohort = load_file("cohorts/amd_oct.yaml")    # one file -> its model
    QualityFile.model_validate(spec)              # a dict; `validate(QualityFile, spec, source)` for a ConfigError

A `ConfigError` (a ValueError) lists every problem, one a line:

    platform/cohorts/amd_oct.yaml: version: missing (required)
    platform/cohorts/amd_oct.yaml: lateralities[0]: must be 'R', 'L', 'B' or 'U' (got 'X')

`dagster.yaml` and `dagster-production.yaml` are Dagster's instance files, validated by Dagster.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

import yaml
from pydantic import (BaseModel, ConfigDict, Field, RootModel, StringConstraints, ValidationError, create_model,
                      field_validator, model_validator)

from imaging.deid.options import BY_NAME as DEID_OPTIONS, FULL_DATES, MODIFIED_DATES
from imaging.deid.pixel_text import IMAGE_TYPES, ON_TEXT, PAGE_SEGMENTATION, SCREENING, THRESHOLDING, PixelTextSettings
from imaging.issuers import normalise
from imaging.pacs.settings import PacsFile
from imaging.quality.expectations import supported as supported_expectation
from imaging.quality.rules import BALANCE, SEVERITIES, SUITE
from imaging.steps.clinical import ACTIONS
from imaging.steps.declared import QUALITY_CHECKS

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PLATFORM_DIR = REPO_ROOT / "platform"
# `platform/` holds configuration only; IMAGING_PLATFORM_DIR lets a deployment keep it elsewhere.
PLATFORM_DIR = Path(os.environ.get("IMAGING_PLATFORM_DIR", DEFAULT_PLATFORM_DIR))


# The disclosure control's defaults (imaging/governance/disclosure.py), for a policy file that omits them.
DEFAULT_MIN_K = 5
DEFAULT_SUPPRESS_BELOW = 10
# Signed approvals a release needs before publication (imaging/governance/approval.py).
DEFAULT_APPROVALS_REQUIRED = 2


class ConfigError(ValueError):
    """A configuration file that cannot be used: every problem, each naming the file and the field."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            super().__init__(f"{len(self.problems)} problems in the platform configuration:\n"
                             + "\n".join(f"  {p}" for p in self.problems))


# --- shared types ----------------------------------------------------------------------------------------

SITE_KEY = r"^[A-Za-z0-9_-]+$"
COHORT_NAME = r"^[a-z0-9][a-z0-9-]{0,62}$"  # becomes a folder: cohorts/<name>/v<version>
LATERALITIES = ("R", "L", "B", "U")

Text = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]  # not empty, not only blanks
SiteKey = Annotated[str, StringConstraints(pattern=SITE_KEY)]
PositiveInt = Annotated[int, Field(ge=1)]
Severity = Literal[SEVERITIES]  # type: ignore[valid-type]


class _Model(BaseModel):
    """Unknown keys are errors; values are not coerced (a quoted number is not a number)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- platform.yaml ----------------------------------------------------------------------------------------

class PlatformFile(_Model):
    start_date: dt.date
    sites: list[SiteKey] = Field(min_length=1)
    # SUPERSEDED by issuers.yaml; allowed until the old executor path that reads it is gone.
    default_issuer: Text | None = None
    deid_options: list[Literal[tuple(DEID_OPTIONS)]]  # type: ignore[valid-type]
    files_per_task: PositiveInt
    landing_sensor_seconds: PositiveInt

    @field_validator("start_date", mode="before")
    @classmethod
    def _iso_date(cls, value):
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return value
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value)
            except ValueError:
                pass
        raise ValueError("must be a date, YYYY-MM-DD")

    @field_validator("sites")
    @classmethod
    def _unique_sites(cls, sites):
        if len(set(sites)) != len(sites):
            raise ValueError("a site is listed twice")
        return sites

    @field_validator("deid_options")
    @classmethod
    def _options(cls, options):
        if FULL_DATES in options and MODIFIED_DATES in options:
            raise ValueError(f"{FULL_DATES} and {MODIFIED_DATES} exclude each other")
        return options


# --- issuers.yaml -----------------------------------------------------------------------------------------

class IssuersFile(_Model):
    sites: dict[SiteKey, Text] = {}
    default_namespace: Text | None = None  # for sites not listed; absent: an unlisted site is an error
    aliases: dict[Text, Text] = {}  # IssuerOfPatientID value -> namespace

    @model_validator(mode="after")
    def _consistent(self):
        if not self.sites and self.default_namespace is None:
            raise ValueError("no site has a namespace (give `sites` or `default_namespace`)")
        seen: dict[str, str] = {}
        for value, namespace in self.aliases.items():
            key = normalise(value)
            if seen.get(key, namespace.strip()) != namespace.strip():
                raise ValueError(f"aliases: header value {value!r} is given to two namespaces")
            seen[key] = namespace.strip()
        for namespace in {n.strip() for n in [*self.sites.values(), self.default_namespace] if n}:
            if seen.setdefault(normalise(namespace), namespace) != namespace:
                raise ValueError(f"namespace {namespace!r} is an alias of another namespace")
        return self


# --- pixel_text.yaml --------------------------------------------------------------------------------------

_PT = PixelTextSettings()  # the engine's defaults; a file that omits a key gets them
Thresholding = Literal[tuple(THRESHOLDING)]  # type: ignore[valid-type]


def _one_pass(value):
    return [value] if isinstance(value, str) else value


class PixelTextTypeFile(_Model):
    """One image type's own settings (`image_types`); a key left out takes the top-level value."""

    frame_sample: PositiveInt | None = None
    max_side: Annotated[int, Field(ge=64)] | None = None
    thresholding: Annotated[list[Thresholding], Field(min_length=1)] | None = None
    despeckle: bool | None = None
    min_contrast: Annotated[int, Field(ge=1, le=254)] | None = None
    overlay: bool | None = None
    overlay_frames: Annotated[int, Field(ge=2)] | None = None
    full_size_side: Annotated[int, Field(ge=0)] | None = None
    screening: Literal[SCREENING] | None = None  # type: ignore[valid-type]
    on_text: Literal[ON_TEXT] | None = None  # type: ignore[valid-type]

    _passes = field_validator("thresholding", mode="before")(classmethod(lambda cls, value: _one_pass(value)))


class PixelTextFile(_Model):
    min_confidence: float = Field(_PT.min_confidence, ge=0, le=100)
    min_word_chars: PositiveInt = _PT.min_word_chars
    min_words: PositiveInt = _PT.min_words
    frame_sample: PositiveInt = _PT.frame_sample
    thresholding: list[Thresholding] = Field(list(_PT.thresholding), min_length=1)
    page_segmentation: Literal[PAGE_SEGMENTATION] = _PT.page_segmentation  # type: ignore[valid-type]
    max_side: int = Field(_PT.max_side, ge=64)
    pass_max_side: dict[Thresholding, Annotated[int, Field(ge=64)]] = dict(_PT.pass_max_side)
    pad: int = Field(_PT.pad, ge=0)
    language: Text = _PT.language
    tessdata: str | None = _PT.tessdata  # empty: TESSDATA_PREFIX, then Debian's folders
    screening: Literal[SCREENING] = _PT.screening  # type: ignore[valid-type]
    min_contrast: int = Field(_PT.min_contrast, ge=1, le=254)
    stroke_max: int = Field(_PT.stroke_max, ge=4, le=64)
    despeckle: bool = _PT.despeckle
    min_crossings: float = Field(_PT.min_crossings, ge=0)
    overlay: bool = _PT.overlay
    overlay_frames: int = Field(_PT.overlay_frames, ge=2)
    full_size_side: int = Field(_PT.full_size_side, ge=0)
    cache_frames: int = Field(_PT.cache_frames, ge=0)
    on_text: Literal[ON_TEXT] = _PT.on_text  # type: ignore[valid-type]
    image_types: dict[Literal[IMAGE_TYPES], PixelTextTypeFile] = {}  # type: ignore[valid-type]

    _passes = field_validator("thresholding", mode="before")(classmethod(lambda cls, value: _one_pass(value)))


# --- quality.yaml -----------------------------------------------------------------------------------------

class MaxCheck(_Model):
    """A check that passes while the observed value is at most `max`."""

    severity: Severity
    max: float = Field(ge=0)
    description: Text


class BalanceCheck(_Model):
    """An accounting equation: passes when both sides are equal, so it has no `max`."""

    severity: Severity
    description: Text


class SuiteCheck(MaxCheck):
    """Failed expectations of a Great Expectations suite in `expectations/`."""

    suite: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]+\.json$")]


_CHECK_MODELS = {BALANCE: BalanceCheck, SUITE: SuiteCheck}


def _asset_checks(asset: str, checks: Mapping[str, str]) -> type[_Model]:
    """The model of one asset's checks: each known check required, any other an error."""
    fields = {name: (_CHECK_MODELS.get(kind, MaxCheck), ...) for name, kind in checks.items()}
    return create_model(f"{asset}_checks", __base__=_Model, **fields)


# Every asset's checks, as declared with the steps (imaging.steps.declared.QUALITY_CHECKS): an unknown or missing asset or check is an error.
QualityChecks = create_model("QualityChecks", __base__=_Model,
                             **{asset: (_asset_checks(asset, checks), ...) for asset, checks in QUALITY_CHECKS.items()})


class QualityFile(_Model):
    top_offenders: PositiveInt = 5
    percentiles: list[Annotated[float, Field(gt=0, lt=1)]] = Field([0.5, 0.9, 0.99], min_length=1)
    placeholder_keys: list[str] = []
    checks: QualityChecks  # type: ignore[valid-type]


# --- clinical_policy.yaml ---------------------------------------------------------------------------------

class ColumnPolicy(_Model):
    aliases: list[Text] | None = None  # absent: the column's own name
    action: Literal[tuple(sorted(ACTIONS))]  # type: ignore[valid-type]
    pattern: Text | None = None  # keep: the whole value must match
    number: Annotated[list[float], Field(min_length=2, max_length=2)] | None = None  # keep: [low, high]
    values: dict[str, str] = {}  # generalise: value -> released value
    top_code: PositiveInt = 90  # age_at_scan: ages from it are reported as it

    @field_validator("pattern")
    @classmethod
    def _regex(cls, pattern):
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(f"not a regular expression: {error}") from None
        return pattern

    @field_validator("number")
    @classmethod
    def _range(cls, number):
        if number[0] > number[1]:
            raise ValueError("must be [low, high] with low <= high")
        return number

    @model_validator(mode="after")
    def _fits_action(self):
        if self.action == "keep" and not (self.pattern or self.number):
            raise ValueError("'keep' needs a pattern or a number range")
        if self.pattern is not None and self.number is not None:
            raise ValueError("give `pattern` or `number`, not both")
        if (self.pattern is not None or self.number is not None) and self.action != "keep":
            raise ValueError("`pattern` and `number` are for action 'keep'")
        if self.values and self.action != "generalise":
            raise ValueError("`values` is for action 'generalise'")
        return self


class QuasiIdentifierPolicy(_Model):
    column: Text  # a released column of `columns`
    band_years: PositiveInt | None = None  # only for an age_at_scan column
    released_as: Text | None = None  # absent: the column's name
    header: Text | None = None  # the DICOM attribute (keyword) that holds the same fact in released files

    @field_validator("header")
    @classmethod
    def _keyword(cls, keyword):
        from pydicom.datadict import tag_for_keyword

        if keyword is not None and tag_for_keyword(keyword) is None:
            raise ValueError(f"{keyword!r} is not a DICOM keyword")
        return keyword


class DisclosureSettings(_Model):
    min_k: PositiveInt = DEFAULT_MIN_K
    suppress_below: PositiveInt = DEFAULT_SUPPRESS_BELOW


class ClinicalPolicyFile(_Model):
    columns: dict[Text, ColumnPolicy]
    identifiers: list[Text] = []
    date_formats: list[Text] = Field(["%Y-%m-%d"], min_length=1)
    quasi_identifiers: list[QuasiIdentifierPolicy] = []
    disclosure: DisclosureSettings = DisclosureSettings()
    approvals_required: PositiveInt = DEFAULT_APPROVALS_REQUIRED  # signed approvals, by distinct approvers

    @field_validator("quasi_identifiers", mode="before")
    @classmethod
    def _names(cls, items):
        """A bare column name is short for `{column: name}`."""
        return [{"column": item} if isinstance(item, str) else item for item in items] \
            if isinstance(items, list) else items

    @field_validator("quasi_identifiers")
    @classmethod
    def _released(cls, items, info):
        columns = info.data.get("columns")
        if columns is None:  # `columns` itself is invalid: reported there
            return items
        for item in items:
            rule = columns.get(item.column)
            if rule is None or rule.action == "drop":
                raise ValueError(f"{item.column!r} is not a released column of `columns`")
            if item.band_years is not None and rule.action != "age_at_scan":
                raise ValueError(f"{item.column!r}: band_years needs an age_at_scan column")
        return items


# --- cohorts/*.yaml ---------------------------------------------------------------------------------------

class AgeRange(_Model):
    min: Annotated[int, Field(ge=0)] | None = None
    max: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _ordered(self):
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min must not be above max")
        return self


class CohortFile(_Model):
    name: Annotated[str, StringConstraints(pattern=COHORT_NAME)]  # a folder name of the release
    version: PositiveInt  # the release folder is v<version>
    description: str = ""
    modalities: list[Annotated[str, StringConstraints(pattern=r"^[A-Z0-9_ ]{1,16}$")]] = []  # DICOM Modality (CS)
    diagnosis_code_prefixes: list[Text] = []
    lateralities: list[Literal[LATERALITIES]] = []  # type: ignore[valid-type]
    age_at_scan: AgeRange | None = None


# --- expectations/*.json ----------------------------------------------------------------------------------

class Expectation(_Model):
    type: Annotated[str, StringConstraints(pattern=r"^expect_[a-z0-9_]+$")]  # a GX expectation, snake case
    kwargs: dict[str, Any] = {}
    severity: Severity = "ERROR"

    @field_validator("type")
    @classmethod
    def _per_batch(cls, value: str) -> str:
        # Suites run batch by batch on the executors (imaging.quality.expectations): only expectations
        # whose counts add up over batches, or that read the schema, can be evaluated that way.
        if not supported_expectation(value):
            raise ValueError("must be a row-wise GX expectation (its counts add up over batches) or a column "
                             "type expectation; see imaging/quality/expectations.py")
        return value


class SuiteFile(_Model):
    name: Text  # the file's name without .json
    description: str = ""
    expectations: list[Expectation] = Field(min_length=1)


# --- spark.yaml -------------------------------------------------------------------------------------------

class SparkFile(RootModel[dict[Annotated[str, StringConstraints(pattern=r"^spark\.[A-Za-z0-9_.-]+$")], str]]):
    """Spark properties, each a string as Spark reads it (quote numbers and booleans)."""

    model_config = ConfigDict(strict=True, frozen=True)


# pacs.yaml: its model (PacsFile) is the PACS package's, imaging/pacs/settings.py.


# --- the loader -------------------------------------------------------------------------------------------

FILES: dict[str, type[BaseModel]] = {
    "platform.yaml": PlatformFile,
    "issuers.yaml": IssuersFile,
    "pixel_text.yaml": PixelTextFile,
    "quality.yaml": QualityFile,
    "clinical_policy.yaml": ClinicalPolicyFile,
    "spark.yaml": SparkFile,
    "pacs.yaml": PacsFile,
}


def model_for(name: str) -> type[BaseModel]:
    """The model of a file, by its path relative to the platform folder."""
    if name.startswith("cohorts/") and name.endswith(".yaml"):
        return CohortFile
    if name.startswith("expectations/") and name.endswith(".json"):
        return SuiteFile
    try:
        return FILES[name]
    except KeyError:
        raise ValueError(f"no model for platform file {name!r}") from None


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
        return yaml.safe_load(text) or {}
    except (yaml.YAMLError, json.JSONDecodeError) as error:
        detail = " ".join(str(error).split())
        raise ConfigError([f"{shown}: not valid {'JSON' if name.endswith('.json') else 'YAML'}: {detail}"]) from None


def validate(model: type[BaseModel], data: Any, source: str) -> Any:
    """`data` as `model`, or a ConfigError naming `source` and every field in error."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError([f"{source}: {line}" for line in describe(error, model)]) from None


def load_file(name: str, directory: str | Path | None = None) -> Any:
    """One platform file (`quality.yaml`, `cohorts/amd_oct.yaml`, ...) as its model."""
    return validate(model_for(name), read_raw(name, directory), display(name, directory))


def load_cohort_files(directory: str | Path | None = None) -> list[CohortFile]:
    """Every `cohorts/*.yaml`, in name order; two definitions may not share a cohort name."""
    root = Path(directory or PLATFORM_DIR)
    cohorts, problems = [], []
    for path in sorted((root / "cohorts").glob("*.yaml")):
        try:
            cohorts.append((path.name, load_file(f"cohorts/{path.name}", root)))
        except ConfigError as error:
            problems += error.problems
    owners: dict[str, str] = {}
    for file, cohort in cohorts:
        if cohort.name in owners:
            problems.append(f"{display('cohorts/' + file, root)}: name: {cohort.name!r} is also the name in "
                            f"cohorts/{owners[cohort.name]}; cohort names must be unique")
        owners.setdefault(cohort.name, file)
    if problems:
        raise ConfigError(problems)
    return [cohort for _, cohort in cohorts]


@dataclass(frozen=True)
class PlatformFiles:
    """Every configuration file of a platform folder, validated."""

    platform: PlatformFile
    issuers: IssuersFile
    pixel_text: PixelTextFile
    quality: QualityFile
    clinical_policy: ClinicalPolicyFile
    spark: SparkFile
    cohorts: tuple[CohortFile, ...]
    suites: Mapping[str, SuiteFile]  # file name (raw_image_index.json) -> suite


def load_platform(directory: str | Path | None = None) -> PlatformFiles:
    """Validate every file the platform reads; one ConfigError lists the problems of all of them."""
    root = Path(directory or PLATFORM_DIR)
    problems: list[str] = []

    def attempt(load, *args):
        try:
            return load(*args)
        except ConfigError as error:
            problems.extend(error.problems)
            return None

    loaded = {name: attempt(load_file, name, root) for name in FILES}
    cohorts = attempt(load_cohort_files, root)
    suites = {}
    for path in sorted((root / "expectations").glob("*.json")):
        suite = attempt(load_file, f"expectations/{path.name}", root)
        if suite is not None and suite.name != path.stem:
            problems.append(f"{display('expectations/' + path.name, root)}: name: must be {path.stem!r}, "
                            f"the file's name (got {suite.name!r})")
        suites[path.name] = suite
    quality = loaded["quality.yaml"]
    if quality is not None:
        for asset, checks in quality.checks:
            for check, rule in checks:
                suite = getattr(rule, "suite", None)
                if suite is not None and suite not in suites:
                    problems.append(f"{display('quality.yaml', root)}: checks.{asset}.{check}.suite: no file "
                                    f"expectations/{suite}; allowed: {', '.join(sorted(suites)) or 'none'}")
    if problems:
        raise ConfigError(problems)
    return PlatformFiles(platform=loaded["platform.yaml"], issuers=loaded["issuers.yaml"],
                         pixel_text=loaded["pixel_text.yaml"], quality=quality,
                         clinical_policy=loaded["clinical_policy.yaml"], spark=loaded["spark.yaml"],
                         cohorts=tuple(cohorts), suites=suites)


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
        return f"{prefix}{str(ctx.get('error', item['msg']))}{got if loc else ''}"
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
