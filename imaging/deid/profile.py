"""A de-identification profile: Table E.1-1 resolved for one set of options.

Resolving happens once per process and option set (cached); the result is a small frozen,
picklable object that Spark ships to executors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from pydicom.datadict import keyword_for_tag

from .lists import allowlist, safe_private
from .options import BY_NAME, FULL_DATES, MODIFIED_DATES, OPTIONS, RESEARCH_DEFAULT
from .table import Row, load_table

# The single actions the engine applies.
REMOVE, EMPTY, DUMMY, KEEP, CLEAN, UID = "X", "Z", "D", "K", "C", "U"


def resolve_basic(action: str) -> str:
    """One action for a combined basic action ("X/Z", "X/Z/D", "X/Z/U*", ...).

    The table means "X unless the IOD needs the attribute present". We do not carry the IOD
    module tables, so we keep the attribute present in the lightest form that satisfies any
    IOD: U* (sequence kept, contained UIDs replaced) if offered, else D (non-empty dummy: meets
    Type 1), else Z (empty: meets Type 2). None of these keeps an original value.
    """
    if "/" not in action:
        return action
    parts = action.rstrip("*").split("/")
    for choice in (UID, DUMMY, EMPTY):
        if choice in parts:
            return choice
    return REMOVE


# Free narrative about the patient or the visit. Table E.1-1 lets Clean Descriptors (and Retain
# Patient Characteristics) keep these cleaned, but a pattern-based cleaner cannot be trusted with
# prose about a person ("lives with her daughter in Ripon"), so they always get the basic action.
# Stricter than the standard allows, never looser.
NARRATIVE = frozenset({
    "AdditionalPatientHistory", "AdmittingDiagnosesDescription", "Allergies",
    "CommentsOnThePerformedProcedureStep", "DischargeDiagnosisDescription", "IdentifyingComments",
    "ImagingServiceRequestComments", "Impressions", "InterpretationDiagnosisDescription",
    "InterpretationText", "MedicalAlerts", "Occupation", "PatientComments", "PatientState",
    "PreMedication", "ReasonForStudy", "ReasonForTheImagingServiceRequest",
    "ReasonForTheRequestedProcedure", "ReasonForVisit", "RequestedProcedureComments", "ResultsComments",
    "ServiceEpisodeDescription", "SpecialNeeds", "StudyComments", "VisitComments",
})


def resolve(row: Row, options: frozenset[str], narrative: bool = False) -> str:
    """The action for a row under the enabled options.

    An enabled option that gives an action overrides the basic one. When several enabled
    options give different actions for the same attribute (e.g. a calibration date under both
    retain_device_identity (K) and retain_longitudinal_modified_dates (C)), the more protective,
    C, wins.
    """
    given = {row.options[name] for name in options if name in row.options}
    if narrative:
        given.discard(CLEAN)
    if CLEAN in given:
        return CLEAN
    if KEEP in given:
        return KEEP
    return resolve_basic(row.basic)


@dataclass(frozen=True)
class DeidProfile:
    """Everything the engine needs to de-identify one file, as plain data."""

    options: tuple[str, ...]  # enabled option names, in declaration order
    actions: dict[int, str]  # tag -> resolved action, for every table row with a plain tag
    basic: dict[int, str]  # tag -> resolved basic action (fallback when C cannot apply to a VR)
    curves: str  # action for every element of a (50xx) curve group
    overlay_data: str  # action for (60xx,3000); X removes the whole overlay group
    overlay_comments: str  # action for (60xx,4000)
    private: str  # X (remove all) or C (keep the reviewed safe list)
    allowlist: dict[int, str]  # tag -> scrub mode ("terms" or "descriptor")
    safe_private: dict[tuple[int, str, int], str]  # (group, creator, offset) -> VR
    # (tag, VR, in a dummied sequence) -> the rule the walk applies (imaging.deid.rules.decide), filled as met
    plans: dict = field(default_factory=dict, compare=False, repr=False)

    def has(self, option: str) -> bool:
        return option in self.options

    @property
    def dates(self) -> str | None:
        """'full', 'modified' or None (no longitudinal option: dates are removed)."""
        if FULL_DATES in self.options:
            return "full"
        if MODIFIED_DATES in self.options:
            return "modified"
        return None


def _canonical(options: Iterable[str] | str | None) -> tuple[str, ...]:
    if options is None:
        chosen = set(RESEARCH_DEFAULT)
    else:
        chosen = {options} if isinstance(options, str) else set(options)
    unknown = sorted(str(o) for o in chosen - BY_NAME.keys())
    if unknown:
        raise ValueError(f"unknown de-identification option(s): {unknown}; known: {sorted(BY_NAME)}")
    if FULL_DATES in chosen and MODIFIED_DATES in chosen:
        raise ValueError(f"{FULL_DATES} and {MODIFIED_DATES} exclude each other")
    return tuple(o.name for o in OPTIONS if o.name in chosen)


def load_profile(options: Iterable[str] | str | None = None) -> DeidProfile:
    """The profile for `options` (None: the research default; an empty list: the basic profile)."""
    return _build(_canonical(options))


@lru_cache(maxsize=None)
def _build(options: tuple[str, ...]) -> DeidProfile:
    table = load_table()
    enabled = frozenset(options)
    actions = {tag: resolve(row, enabled, keyword_for_tag(tag) in NARRATIVE) for tag, row in table.rows.items()}
    basic = {tag: resolve_basic(row.basic) for tag, row in table.rows.items()}
    safe = {}
    if "retain_safe_private" in enabled:
        safe = {(s.group, s.creator, s.offset): s.vr for s in safe_private()}
    return DeidProfile(
        options=options,
        actions=actions,
        basic=basic,
        curves=resolve(table.curves, enabled),
        overlay_data=resolve(table.overlay_data, enabled),
        overlay_comments=resolve(table.overlay_comments, enabled),
        private=resolve(table.private, enabled),
        allowlist=allowlist(frozenset(table.rows)),
        safe_private=safe,
    )
