"""Clinical labels stamped into released images: what a cohort's `stamp:` list writes into each DICOM header.

A cohort file may list released metadata columns to stamp (`stamp: [age_band, sex, diagnosis_code]`). Each
stamped image then carries, besides its pixels and de-identified header:

- the Clinical Trial Subject, Study and Series modules (PS3.3 C.7.1.3, C.7.2.3, C.7.3.2): sponsor
  (ClinicalTrialSponsorName, the cohort's `sponsor`), protocol (ClinicalTrialProtocolID and
  ClinicalTrialProtocolName: the cohort's name), subject (ClinicalTrialSubjectID: the patient pseudonym),
  time point (ClinicalTrialTimePointID: the study date as released, shifted like every date; the labels are
  the clinical record dated on or before it); the site and coordinating centre attributes are present and
  empty (type 2: a site is identifying). The cohort's version is not stamped, so an image whose labels did
  not change is byte-identical from one version to the next (and stored once);
- each listed column in a standard attribute where DICOM has one for it (`STANDARD`: sex is PatientSex),
  otherwise in one private block: group (0013), private creator `CREATOR`, the n-th private column at
  element (0013,10nn), n from 01 in the order of `stamp:`, its VR from the column's type (`VRS`). A null
  value is an empty element. The release owns group (0013): whatever a header held there is replaced.

A researcher reads them with pydicom:

    ds = pydicom.dcmread(path)
    labels = ds.private_block(0x0013, "IMAGING RELEASE LABELS")
    labels[0x01].value, ds.ClinicalTrialSubjectID, ds.PatientSex

`StampPlan.describe()` is what the data card says (column, tag, VR); the review reads the headers back through
it (`read_labels`) and holds every stamped value to the metadata's. Pure: pydicom and pyarrow types only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

GROUP = 0x0013
CREATOR = "IMAGING RELEASE LABELS"
SUBJECT = "patient_pseudonym"  # the release column stamped as ClinicalTrialSubjectID
TIME_POINT = "study_date"  # ... and as ClinicalTrialTimePointID
# Release columns with a standard attribute of their own (the rest go to the private block).
STANDARD = {"sex": "PatientSex"}
# DICOM's enumerated values of attributes a released value is written to; any other value is emptied.
ENUMERATED = {"PatientSex": frozenset({"M", "F", "O"})}
# Release columns never stamped: where the image is and what its bytes are (circular), not labels.
UNSTAMPABLE = frozenset({"file", "sha256"})
# A column's type (pyarrow's name for it) -> the VR of its private element.
VRS = {"string": "UT", "large_string": "UT", "int8": "SL", "int16": "SL", "int32": "SL", "int64": "SV",
       "float": "FL", "double": "FD", "bool": "CS", "date32[day]": "DA"}
# Type 2 attributes of the modules: present, empty.
EMPTY = ("ClinicalTrialSiteID", "ClinicalTrialSiteName", "ClinicalTrialCoordinatingCenterName")
TIME_POINT_DESCRIPTION = "study date as released (shifted); labels as of the latest clinical record on or before it"


class StampError(ValueError):
    """A stamp list that cannot be written (an unknown column, a type without a VR)."""


@dataclass(frozen=True)
class StampColumn:
    """One stamped column: where its value goes in the header."""

    column: str
    vr: str
    keyword: str | None = None  # a standard attribute; None: the private block
    element: int | None = None  # the private block's element offset (0x01...), when private

    @property
    def tag(self) -> str:
        """The attribute's tag as DICOM writes it, e.g. (0013,1001) or (0010,0040)."""
        if self.keyword is not None:
            from pydicom.datadict import tag_for_keyword

            number = tag_for_keyword(self.keyword)
            return f"({number >> 16:04X},{number & 0xFFFF:04X})"
        return f"({GROUP:04X},10{self.element:02X})"


@dataclass(frozen=True)
class StampPlan:
    """What one cohort stamps: the trial attributes' constants and each column's place."""

    sponsor: str
    protocol: str  # the cohort's name
    columns: tuple[StampColumn, ...]

    @classmethod
    def build(cls, cohort: str, sponsor: str | None, columns: Sequence[str], types: Mapping[str, str]) -> "StampPlan":
        """A plan for `columns` of a release whose metadata column types are `types` (column -> pyarrow type
        name). Columns with a standard attribute go there, the others to the private block in list order."""
        out, private = [], 0
        for column in columns:
            if column in UNSTAMPABLE or column not in types:
                raise StampError(f"stamp: {column!r} is not a column of the release's metadata that can be stamped")
            vr = VRS.get(types[column])
            if vr is None:
                raise StampError(f"stamp: {column!r} has type {types[column]}, which has no DICOM VR here")
            if column in STANDARD:
                from pydicom.datadict import dictionary_VR

                out.append(StampColumn(column, dictionary_VR(STANDARD[column]), keyword=STANDARD[column]))
            else:
                private += 1
                out.append(StampColumn(column, vr, element=private))
        if private > 0xFF:
            raise StampError("stamp: at most 255 columns go to the private block")
        return cls(sponsor or cohort, cohort, tuple(out))

    @property
    def value_columns(self) -> tuple[str, ...]:
        """The release columns whose values the header takes (subject, time point, each stamped column)."""
        return (SUBJECT, TIME_POINT, *(c.column for c in self.columns))

    def apply(self, dataset, values: Mapping) -> None:
        """Stamp `dataset` (a pydicom Dataset) with the trial attributes and each column's value from `values`."""
        for tag in [t for t in dataset.keys() if t.group == GROUP]:
            del dataset[tag]
        dataset.ClinicalTrialSponsorName = self.sponsor
        dataset.ClinicalTrialProtocolID = self.protocol
        dataset.ClinicalTrialProtocolName = self.protocol
        dataset.ClinicalTrialSubjectID = _text(values.get(SUBJECT))
        dataset.ClinicalTrialTimePointID = _dicom_date(values.get(TIME_POINT))
        dataset.ClinicalTrialTimePointDescription = TIME_POINT_DESCRIPTION
        for keyword in EMPTY:
            setattr(dataset, keyword, "")
        block = None
        for column in self.columns:
            if column.keyword is not None:
                setattr(dataset, column.keyword, expected_label(column, values.get(column.column)) or "")
                continue
            value = dicom_value(column.vr, values.get(column.column))
            if block is None:
                block = dataset.private_block(GROUP, CREATOR, create=True)
            block.add_new(column.element, column.vr, value)

    def describe(self) -> dict:
        """What the data card and release.json say (and the review reads back)."""
        return {"private_creator": CREATOR, "group": f"{GROUP:04X}",
                "trial": {"ClinicalTrialSponsorName": self.sponsor, "ClinicalTrialProtocolID": self.protocol,
                          "ClinicalTrialProtocolName": self.protocol, "ClinicalTrialSubjectID": SUBJECT,
                          "ClinicalTrialTimePointID": TIME_POINT},
                "columns": [{"column": c.column, "tag": c.tag, "vr": c.vr,
                             **({"keyword": c.keyword} if c.keyword else {"element": c.element})}
                            for c in self.columns]}

    def key(self) -> dict:
        """Everything of the plan that decides the bytes (part of the content key)."""
        return {"sponsor": self.sponsor, "protocol": self.protocol, "columns": [asdict(c) for c in self.columns]}

    @classmethod
    def from_description(cls, described: Mapping) -> "StampPlan":
        """The plan a data card describes (`describe()`), for the review."""
        trial = described.get("trial", {})
        columns = tuple(StampColumn(c["column"], c["vr"], c.get("keyword"), c.get("element"))
                        for c in described.get("columns", []))
        return cls(trial.get("ClinicalTrialSponsorName", ""), trial.get("ClinicalTrialProtocolID", ""), columns)


def _text(value) -> str:
    return "" if value is None else str(value)


def _dicom_date(value) -> str:
    """A released date ("2024-03-01", or DICOM's "20240301") as DA; empty when absent."""
    return "" if value in (None, "") else str(value).replace("-", "")[:8]


def dicom_value(vr: str, value):
    """A released value as its element holds it (None: an empty element)."""
    if value is None:
        return None
    if vr == "CS":
        return "TRUE" if value in (True, "true", "TRUE") else "FALSE"
    if vr in ("SL", "SV"):
        return int(value)
    if vr in ("FD", "FL"):
        return float(value)
    if vr == "DA":
        return _dicom_date(value)
    return str(value)


def header_value(vr: str, value):
    """What an element read back from a header means as a released value (for comparison with the metadata)."""
    if value in (None, "", b""):
        return None
    if vr == "CS":
        return str(value) == "TRUE"
    if vr in ("SL", "SV"):
        return int(value)
    if vr in ("FD", "FL"):
        return float(value)
    if vr == "DA":
        text = str(value)
        return f"{text[:4]}-{text[4:6]}-{text[6:8]}" if len(text) == 8 else text
    return str(value)


def read_labels(dataset, plan: StampPlan) -> dict[str, object]:
    """Each stamped column's value as `dataset`'s header holds it (None: absent or empty), subject and time
    point included: the review compares these with the metadata row."""
    out: dict[str, object] = {}
    try:
        block = dataset.private_block(GROUP, CREATOR)
    except KeyError:
        block = None
    for column in plan.columns:
        if column.keyword is not None:
            value = dataset[column.keyword].value if column.keyword in dataset else None
            out[column.column] = str(value) if value not in (None, "") else None
            continue
        element = block[column.element] if block is not None and column.element in block else None
        out[column.column] = None if element is None else header_value(column.vr, element.value)
    subject = dataset.get("ClinicalTrialSubjectID")
    out[SUBJECT] = str(subject) if subject not in (None, "") else None
    out[TIME_POINT] = header_value("DA", dataset.get("ClinicalTrialTimePointID"))
    return out


def undescribed_elements(dataset, plan: StampPlan) -> int:
    """Elements of group (0013) the plan does not describe: a header holding more than the card says."""
    described = {GROUP << 16 | 0x0010}
    described |= {GROUP << 16 | 0x1000 | c.element for c in plan.columns if c.element is not None}
    return sum(1 for tag in dataset.keys() if tag.group == GROUP and int(tag) not in described)


def expected_label(column: StampColumn, value):
    """What a header stamped with the released `value` reads back as (`read_labels`): the value itself, or
    None where the element is empty (a null, or a value outside a standard attribute's enumerated values).
    A standard attribute holds the value as text, as the quasi-identifier rules write it."""
    if column.keyword is not None:
        text = None if value in (None, "") else str(value)
        allowed = ENUMERATED.get(column.keyword)
        return None if text is None or (allowed and text not in allowed) else text
    stored = dicom_value(column.vr, value)
    return None if stored is None else header_value(column.vr, stored)


def label_tags(plan: StampPlan) -> list[int]:
    """The tags a review reads back (pydicom's `specific_tags`): the trial attributes, the standard attributes
    and the whole private block."""
    from pydicom.datadict import tag_for_keyword

    keywords = ["ClinicalTrialSubjectID", "ClinicalTrialTimePointID", *(c.keyword for c in plan.columns if c.keyword)]
    private = [GROUP << 16 | element for element in range(0x0010, 0x0100)]  # creators: any block of the group
    private += [GROUP << 16 | 0x1000 | offset for offset in range(0x100)]
    return [tag_for_keyword(k) for k in keywords] + private


def label_mismatches(labels: Mapping, plan: StampPlan, row: Mapping) -> list[str]:
    """The stamped columns (with their tags) whose header value is not what the metadata row says."""
    out = []
    for column in plan.columns:
        if labels.get(column.column) != expected_label(column, row.get(column.column)):
            out.append(f"{column.column} {column.tag}")
    if (labels.get(SUBJECT) or None) != (row.get(SUBJECT) or None):
        out.append(f"{SUBJECT} (ClinicalTrialSubjectID)")
    if TIME_POINT in row and _dicom_date(labels.get(TIME_POINT)) != _dicom_date(row.get(TIME_POINT)):
        out.append(f"{TIME_POINT} (ClinicalTrialTimePointID)")
    return out
