"""Clinical extracts: parsing a site's CSV and the column policy that de-identifies it.

Pure functions. The policy is the only way a clinical value reaches the de-identified
zone: unknown columns are dropped, kept columns must match a pattern or a number range,
birth dates become age at scan, dates are shifted by the patient's own shift, identifiers
that researchers need to group by become keyed tokens.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import io
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

from imaging.records import BatchStep, ClinicalExtract, ClinicalRow, Quarantined, outcome_schema

ACTIONS = {"keep", "generalise", "age_at_scan", "shift_date", "pseudonymise", "drop"}


class ExtractError(ValueError):
    """A clinical extract that cannot be used; the message names no value from it."""


@dataclass(frozen=True)
class ExtractLine:
    """One row of a site's CSV extract, as parsed: before the placeholder rule (`read_extract`)."""

    number: int  # from 1, after the header
    patient_id: str  # stripped; "" when the row has none
    columns: dict[str, str]  # the other non-empty cells, by lower-cased, stripped column name


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
                          columns={k: v.strip() for k, v in row.items() if k and isinstance(v, str) and v.strip()})


def parse_date(text: str | None, formats: tuple[str, ...]) -> dt.date | None:
    if not text:
        return None
    for fmt in formats:
        try:
            return dt.datetime.strptime(text.strip(), fmt).date()
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


@dataclass(frozen=True)
class ClinicalPolicy:
    rules: tuple[ColumnRule, ...]
    identifiers: tuple[str, ...]
    date_formats: tuple[str, ...]

    @classmethod
    def from_dict(cls, spec: Mapping, source: str = "platform/clinical_policy.yaml") -> "ClinicalPolicy":
        """From a parsed clinical_policy.yaml; a ConfigError (imaging.config_files) names every mistake."""
        from imaging.config_files import ClinicalPolicyFile, validate

        return cls.from_model(validate(ClinicalPolicyFile, spec, source))

    @classmethod
    def from_model(cls, spec) -> "ClinicalPolicy":
        """From a validated `imaging.config_files.ClinicalPolicyFile`."""
        rules = tuple(ColumnRule(
            name=name, action=rule.action,
            aliases=tuple(a.lower() for a in rule.aliases or [name]),
            pattern=rule.pattern,
            number=(float(rule.number[0]), float(rule.number[1])) if rule.number else None,
            values={k.upper(): v for k, v in rule.values.items()},
            top_code=rule.top_code,
        ) for name, rule in spec.columns.items())
        return cls(rules, tuple(i.lower() for i in spec.identifiers), tuple(spec.date_formats))

    @property
    def released(self) -> tuple[ColumnRule, ...]:
        return tuple(rule for rule in self.rules if rule.action != "drop")

    @property
    def output_columns(self) -> tuple[str, ...]:
        return tuple(rule.name for rule in self.released)

    @property
    def output_types(self) -> dict[str, str]:
        """Column -> 'int' | 'double' | 'string', for the manifest's fixed schema."""
        return {r.name: "int" if r.action == "age_at_scan" else "double" if r.number else "string"
                for r in self.released}

    def identifying_values(self, record: Mapping[str, str] | None) -> tuple[str, ...]:
        """The patient's own identifiers in a record, for scrubbing DICOM free text."""
        if not record:
            return ()
        return tuple(v for k, v in sorted(record.items()) if k in self.identifiers and len(v) >= 3)

    def apply(self, record: Mapping[str, str] | None, *, scan_date: dt.date | None, shift_days: int,
              token: Callable[[str, str], str] | None = None) -> dict:
        """The de-identified clinical fields of one record (None where absent or invalid).

        `token(column, value)` makes the keyed token of a `pseudonymise` column; without it
        such columns stay empty rather than pass in clear.
        """
        out: dict = {name: None for name in self.output_columns}
        if not record:
            return out
        for rule in self.released:
            raw = next((record[a] for a in rule.aliases if record.get(a)), None)
            if raw is not None:
                out[rule.name] = self._value(rule, raw, scan_date, shift_days, token)
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


def load_policy() -> ClinicalPolicy:
    """The deployment's clinical policy, `platform/clinical_policy.yaml`."""
    from imaging.config_files import load_file

    return ClinicalPolicy.from_model(load_file("clinical_policy.yaml"))


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

    def __call__(self):
        return functools.partial(read_extract, placeholders=self.placeholders | {""})

    def step(self) -> BatchStep:
        return BatchStep(self, ClinicalExtract, outcome_schema(ClinicalRow))


def read_extract(extract: ClinicalExtract, placeholders: frozenset[str] = frozenset({""})
                 ) -> Iterator[ClinicalRow | Quarantined]:
    """The rows of one extract, or one quarantine record (accounted to the extract's own day); a row
    whose patient_id is a placeholder is a quarantine record of its own."""
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
        else:
            yield ClinicalRow(site=extract.site, extract_date=extract.extract_date, row_number=line.number,
                              patient_id=line.patient_id, clinical=line.columns)


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
