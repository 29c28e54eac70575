"""Clinical extracts: parsing a site's CSV and the column policy that de-identifies it.

Pure functions. The policy is the only way a clinical value reaches the de-identified
zone: unknown columns are dropped, kept columns must match a pattern or a number range,
birth dates become age at scan, dates are shifted by the patient's own shift, identifiers
that researchers need to group by become keyed tokens. The policy's file, platform/clinical_policy.yaml,
is read into `ClinicalPolicyFile` (below), which also holds the release's disclosure settings and the signed
approvals it needs (imaging.governance reads those from the same model).
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import io
import re
from dataclasses import dataclass, field
from typing import Annotated, Callable, Iterator, Literal, Mapping

from pydantic import Field, field_validator, model_validator

from imaging.clinical_source import DIAGNOSIS_CODE, EYE_MISSING, EYE_NOT_KNOWN, normal_eye
from imaging.config_model import PositiveInt, StrictModel, Text, validate
from imaging.records import BatchStep, ClinicalExtract, ClinicalRow, Quarantined, outcome_schema

ACTIONS = {"keep", "generalise", "age_at_scan", "shift_date", "pseudonymise", "drop"}

# The disclosure control's defaults (imaging/governance/disclosure.py), for a policy file that omits them.
DEFAULT_MIN_K = 5
DEFAULT_SUPPRESS_BELOW = 10
# Signed approvals a release needs before publication (imaging/governance/approval.py).
DEFAULT_APPROVALS_REQUIRED = 2


# --- platform/clinical_policy.yaml, its model -------------------------------------------------------------

class ColumnPolicy(StrictModel):
    aliases: list[Text] | None = None  # absent: the column's own name
    action: Literal[tuple(sorted(ACTIONS))]  # type: ignore[valid-type]
    pattern: Text | None = None  # keep: the whole value must match
    number: Annotated[list[float], Field(min_length=2, max_length=2)] | None = None  # keep: [low, high]
    values: dict[str, str] = {}  # generalise: value -> released value
    top_code: PositiveInt = 90  # age_at_scan: ages from it are reported as it
    # A measurement of one eye: also released for the eye each image shows, as eye_<name> (and
    # eye_<name>_days_before); `diagnosis_code` as eye_diagnosis_codes, the eye's diagnoses in force.
    eye: bool = False

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
        if self.eye and self.action not in ("keep", "generalise"):
            raise ValueError("`eye` is for a measured value: action 'keep' or 'generalise'")
        return self


class QuasiIdentifierPolicy(StrictModel):
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


class DisclosureSettings(StrictModel):
    min_k: PositiveInt = DEFAULT_MIN_K
    suppress_below: PositiveInt = DEFAULT_SUPPRESS_BELOW


class ClinicalPolicyFile(StrictModel):
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


class ExtractError(ValueError):
    """A clinical extract that cannot be used; the message names no value from it."""


@dataclass(frozen=True)
class ExtractLine:
    """One row of a site's CSV extract, as parsed: before the placeholder rule (`read_extract`)."""

    number: int  # from 1, after the header
    patient_id: str  # stripped; "" when the row has none
    columns: dict[str, str]  # the other non-empty cells, by lower-cased, stripped column name
    eye_column: bool = False  # the extract has an `eye` column: each row is an observation of one eye


def parse_extract(data: bytes) -> Iterator[ExtractLine]:
    """Each row of a site's CSV extract: its row number, patient_id and other columns.

    Column names are lower-cased and stripped; empty cells are left out; a row without a
    patient_id is yielded with an empty one (the reader quarantines it, never drops it). A later
    row for the same patient supersedes an earlier one (the caller keeps the highest row number).
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ExtractError("extract is not UTF-8 text") from error
    reader = csv.DictReader(io.StringIO(text))
    header = [(h or "").strip().lower() for h in (reader.fieldnames or [])]
    if "patient_id" not in header:
        raise ExtractError("extract has no patient_id column")
    reader.fieldnames = header
    for number, row in enumerate(reader, start=1):
        patient_id = (row.pop("patient_id", None) or "").strip()
        yield ExtractLine(number=number, patient_id=patient_id,
                          columns={k: v.strip() for k, v in row.items() if k and isinstance(v, str) and v.strip()},
                          eye_column=EYE_COLUMN in header)


# How an extract gives a value per eye: an `eye` column (each row then observes one eye, R/L/B or OD/OS/OU), or
# per-eye column pairs (`visual_acuity_logmar_right` / `_left`, `iop_od` / `iop_os`).
EYE_COLUMN = "eye"
EYE_SUFFIXES = {"_right": "R", "_left": "L", "_od": "R", "_os": "L"}


@dataclass(frozen=True)
class EyeSplit:
    """One extract row split into the patient's own columns and each eye's values (or why it cannot be)."""

    patient: dict[str, str]
    eyes: dict[str, dict[str, str]]  # R/L/B -> {column without its per-eye suffix: value}
    problem: str | None = None


def split_eyes(line: ExtractLine, eye_aliases: frozenset[str]) -> EyeSplit:
    """A row's patient columns and eye values. In an extract with an `eye` column, the columns the policy marks
    per eye (`eye_aliases`) are that eye's; every column ending in a per-eye suffix is its eye's, in any extract."""
    patient: dict[str, str] = {}
    eyes: dict[str, dict[str, str]] = {}
    own_eye = None
    if line.eye_column:
        own_eye = normal_eye(line.columns.get(EYE_COLUMN))
        if own_eye is None:
            return EyeSplit({}, {}, EYE_NOT_KNOWN if line.columns.get(EYE_COLUMN) else EYE_MISSING)
    for column, value in line.columns.items():
        if column == EYE_COLUMN and line.eye_column:
            continue
        suffix = next((s for s in EYE_SUFFIXES if column.endswith(s) and len(column) > len(s)), None)
        if suffix is not None:
            eyes.setdefault(EYE_SUFFIXES[suffix], {})[column[:-len(suffix)]] = value
        elif own_eye is not None and column in eye_aliases:
            eyes.setdefault(own_eye, {})[column] = value
        else:
            patient[column] = value
    return EyeSplit(patient, eyes)


def parse_date(text: str | None, formats: tuple[str, ...]) -> dt.date | None:
    """The date in `text` by the first of `formats` that reads it; an ISO date-time (a database's `timestamp`
    column rendered as text) is read for its date."""
    if not text:
        return None
    text = text.strip()
    candidates = (text, text[:10]) if len(text) > 10 and text[10] in " T" else (text,)
    for candidate in candidates:
        for fmt in formats:
            try:
                return dt.datetime.strptime(candidate, fmt).date()
            except ValueError:
                continue
    return None


@dataclass(frozen=True)
class ColumnRule:
    name: str
    action: str
    aliases: tuple[str, ...]
    pattern: str | None = None
    number: tuple[float, float] | None = None
    values: Mapping[str, str] = field(default_factory=dict)
    top_code: int = 90
    eye: bool = False


EYE_PREFIX = "eye_"
DAYS_BEFORE = "_days_before"
EYE_DIAGNOSES = "eye_diagnosis_codes"
IMAGED_EYE = "eye"  # the released column saying which eye an image shows
DIAGNOSES_SEPARATOR = ";"


@dataclass(frozen=True)
class EyeRecord:
    """What the link step found for the eye an image shows: its latest eye fields as of the image's day, how many
    days before each was observed, and the diagnoses in force for that eye (or both)."""

    eye: str | None
    clinical: Mapping[str, str] | None = None
    days_before: Mapping[str, int] | None = None
    diagnoses: tuple[str, ...] = ()

    @classmethod
    def of(cls, image) -> "EyeRecord":
        """From a `LinkedImage`."""
        return cls(image.eye, image.eye_clinical, image.eye_days_before, tuple(image.eye_diagnoses or ()))


@dataclass(frozen=True)
class ClinicalPolicy:
    rules: tuple[ColumnRule, ...]
    identifiers: tuple[str, ...]
    date_formats: tuple[str, ...]

    @classmethod
    def from_dict(cls, spec: Mapping, source: str = "platform/clinical_policy.yaml") -> "ClinicalPolicy":
        """From a parsed clinical_policy.yaml; a ConfigError names every mistake."""
        return cls.from_model(validate(ClinicalPolicyFile, spec, source))

    @classmethod
    def from_model(cls, spec) -> "ClinicalPolicy":
        """From a validated `ClinicalPolicyFile`."""
        rules = tuple(ColumnRule(
            name=name, action=rule.action,
            aliases=tuple(a.lower() for a in rule.aliases or [name]),
            pattern=rule.pattern,
            number=(float(rule.number[0]), float(rule.number[1])) if rule.number else None,
            values={k.upper(): v for k, v in rule.values.items()},
            top_code=rule.top_code, eye=rule.eye,
        ) for name, rule in spec.columns.items())
        return cls(rules, tuple(i.lower() for i in spec.identifiers), tuple(spec.date_formats))

    @property
    def released(self) -> tuple[ColumnRule, ...]:
        return tuple(rule for rule in self.rules if rule.action != "drop")

    @property
    def eye_rules(self) -> tuple[ColumnRule, ...]:
        """The released per-eye measurements (the diagnosis code is released per eye as the diagnoses in force)."""
        return tuple(r for r in self.released if r.eye and r.name != DIAGNOSIS_CODE)

    @property
    def eye_diagnosis_rule(self) -> ColumnRule | None:
        return next((r for r in self.released if r.eye and r.name == DIAGNOSIS_CODE), None)

    @property
    def eye_aliases(self) -> frozenset[str]:
        """Every column name a per-eye field (or the diagnosis code) goes by."""
        return frozenset(a for r in self.released if r.eye for a in r.aliases)

    @property
    def eye_columns(self) -> dict[str, str]:
        """The eye-level released columns and their types: which eye the image shows, each eye field's value and days
        before the image, the eye's diagnoses in force. None when the policy marks no column per eye."""
        if not any(r.eye for r in self.released):
            return {}
        out = {IMAGED_EYE: "string"}
        for rule in self.eye_rules:
            out[EYE_PREFIX + rule.name] = _type(rule)
            out[EYE_PREFIX + rule.name + DAYS_BEFORE] = "int"
        if self.eye_diagnosis_rule is not None:
            out[EYE_DIAGNOSES] = "string"
        return out

    @property
    def output_columns(self) -> tuple[str, ...]:
        return tuple(rule.name for rule in self.released) + tuple(self.eye_columns)

    @property
    def output_types(self) -> dict[str, str]:
        """Column -> 'int' | 'double' | 'string', for the manifest's fixed schema."""
        return {r.name: _type(r) for r in self.released} | self.eye_columns

    def identifying_values(self, record: Mapping[str, str] | None) -> tuple[str, ...]:
        """The patient's own identifiers in a record, for scrubbing DICOM free text."""
        if not record:
            return ()
        return tuple(v for k, v in sorted(record.items()) if k in self.identifiers and len(v) >= 3)

    def apply(self, record: Mapping[str, str] | None, *, scan_date: dt.date | None, shift_days: int,
              token: Callable[[str, str], str] | None = None, eye: EyeRecord | None = None) -> dict:
        """The de-identified clinical fields of one record (None where absent or invalid), and the eye-level ones of
        the eye the image shows (`eye`), each through the rule of the column it measures.

        `token(column, value)` makes the keyed token of a `pseudonymise` column; without it
        such columns stay empty rather than pass in clear.
        """
        out: dict = {name: None for name in self.output_columns}
        for rule in self.released if record else ():
            raw = next((record[a] for a in rule.aliases if record.get(a)), None)
            if raw is not None:
                out[rule.name] = self._value(rule, raw, scan_date, shift_days, token)
        if eye is not None and eye.eye is not None and self.eye_columns:
            out.update(self._eye(eye, scan_date, shift_days, token))
        return out

    def _eye(self, eye: EyeRecord, scan_date: dt.date | None, shift_days: int, token) -> dict:
        out: dict = {IMAGED_EYE: eye.eye}
        values, days = eye.clinical or {}, eye.days_before or {}
        for rule in self.eye_rules:
            alias = next((a for a in rule.aliases if values.get(a)), None)
            value = self._value(rule, values[alias], scan_date, shift_days, token) if alias else None
            out[EYE_PREFIX + rule.name] = value
            out[EYE_PREFIX + rule.name + DAYS_BEFORE] = days.get(alias) if value is not None else None
        rule = self.eye_diagnosis_rule
        if rule is not None:
            codes = sorted({c for c in (self._value(rule, d, scan_date, shift_days, token) for d in eye.diagnoses) if c})
            out[EYE_DIAGNOSES] = DIAGNOSES_SEPARATOR.join(codes) or None
        return out

    def _value(self, rule: ColumnRule, raw: str, scan_date: dt.date | None, shift_days: int, token):
        if rule.action == "pseudonymise":
            return token(rule.name, raw.strip()) if token else None
        if rule.action == "keep" and rule.pattern:
            return raw if re.fullmatch(rule.pattern, raw) else None
        if rule.action == "keep":
            try:
                number = float(raw)
            except ValueError:
                return None
            low, high = rule.number
            return number if low <= number <= high else None
        if rule.action == "generalise":
            return rule.values.get(raw.strip().upper())
        day = parse_date(raw, self.date_formats)
        if day is None:
            return None
        if rule.action == "shift_date":
            return (day + dt.timedelta(days=shift_days)).isoformat()
        return age_in_years(day, scan_date, rule.top_code)


def _type(rule: ColumnRule) -> str:
    return "int" if rule.action == "age_at_scan" else "double" if rule.number else "string"


def age_in_years(birth: dt.date, on: dt.date | None, top_code: int = 90) -> int | None:
    """Whole years between birth and `on`, capped at `top_code` (ages above it identify)."""
    if on is None or birth > on:
        return None
    years = on.year - birth.year - ((on.month, on.day) < (birth.month, birth.day))
    return min(years, top_code)


def extract_date(url: str) -> str | None:
    """The date an extract is named for (`<YYYY-MM-DD>.csv`), or None for any other file."""
    name = url.rsplit("/", 1)[-1]
    if not name.endswith(".csv"):
        return None
    try:
        return dt.date.fromisoformat(name[:-4]).isoformat()
    except ValueError:
        return None


def extracts_needed(site_days, list_extracts) -> list[ClinicalExtract]:
    """The dated extracts a run reads: each site's extracts dated on or before its last date.

    `list_extracts(site)` lists a site's clinical folder (any names: undated ones are ignored).
    """
    last: dict[str, str] = {}
    for key in site_days:
        last[key.site] = max(last.get(key.site, key.date), key.date)
    found = []
    for site, until in sorted(last.items()):
        for url in list_extracts(site):
            day = extract_date(url)
            if day is not None and day <= until:
                found.append(ClinicalExtract(site, day, url))
    return found


# An extract row whose linkage key is empty or a site's "unknown patient" placeholder (platform/quality.yaml
# placeholder_keys) joins nobody's images, or everybody's: it is quarantined, a row each, never linked.
PLACEHOLDER_ROW = "extract row with an empty or placeholder patient_id"


@dataclass(frozen=True)
class ExtractJob:
    """Reading a run's extracts; `setup` for a `BatchStep`. `placeholders` are compared trimmed and
    upper-cased, the empty key always among them."""

    placeholders: frozenset[str] = frozenset({""})
    eye_aliases: frozenset[str] = frozenset()  # the policy's per-eye column names (`ClinicalPolicy.eye_aliases`)

    def __call__(self):
        return functools.partial(read_extract, placeholders=self.placeholders | {""}, eye_aliases=self.eye_aliases)

    def step(self) -> BatchStep:
        return BatchStep(self, ClinicalExtract, outcome_schema(ClinicalRow))


def read_extract(extract: ClinicalExtract, placeholders: frozenset[str] = frozenset({""}),
                 eye_aliases: frozenset[str] = frozenset()) -> Iterator[ClinicalRow | Quarantined]:
    """The rows of one extract, or one quarantine record (accounted to the extract's own day); a row
    whose patient_id is a placeholder, or whose eye is not one (`split_eyes`), is a quarantine record of its own.

    Each row gives the patient's record (its columns that are not per eye) and an eye row for each eye it
    measures (`ClinicalRow.eye`), dated by the extract."""
    from imaging import fs as fsx  # executor-side import keeps this module light for the driver

    def held(reason: str) -> Quarantined:
        return Quarantined(date=extract.extract_date, site=extract.site, source_path=extract.url, size_bytes=None,
                           sha256=None, reason=reason)

    try:
        rows = list(parse_extract(fsx.read_bytes(extract.url)))
    except ExtractError as error:
        yield held(str(error))
        return
    except Exception as error:  # noqa: BLE001 - a broken extract is quarantined, not fatal
        yield held(f"unreadable extract ({type(error).__name__})")
        return
    for line in rows:
        if line.patient_id.strip().upper() in placeholders:
            yield held(PLACEHOLDER_ROW)
            continue
        split = split_eyes(line, eye_aliases)
        if split.problem is not None:
            yield held(split.problem)
            continue
        yield ClinicalRow(site=extract.site, extract_date=extract.extract_date, row_number=line.number,
                          patient_id=line.patient_id, clinical=split.patient)
        for eye, values in sorted(split.eyes.items()):
            yield ClinicalRow(site=extract.site, extract_date=extract.extract_date, row_number=line.number,
                              patient_id=line.patient_id, clinical=values, eye=eye)


# The link step's rule: an image whose study date is before its linked record's birth date cannot be
# right (the study date or the record is wrong), so the image is quarantined, not linked.
STUDY_BEFORE_BIRTH = "study date before the linked record's birth date"


def extracts_by_site_day(site_days, extracts) -> dict[str, int]:
    """How many of the extracts a run reads each of its site-days accounts for (`date|site` -> count).

    An extract counts once in the run: on its own site-day when the run covers it, otherwise on the
    earliest site-day of its site in the run dated after it (the first that reads it as its as-of record),
    so the site-days' counts add up to the run's."""
    counts = {f"{k.date}|{k.site}": 0 for k in site_days}
    for extract in extracts:
        later = sorted(k.date for k in site_days if k.site == extract.site and k.date >= extract.extract_date)
        if later:
            counts[f"{later[0]}|{extract.site}"] += 1
    return counts
