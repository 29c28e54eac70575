"""The PS3.15 Annex E options this engine knows: config name, Table E.1-1 column, CID 7050 code."""

from __future__ import annotations

from dataclasses import dataclass

STANDARD_REVISION = "2024b"
CODING_SCHEME = "DCM"


@dataclass(frozen=True)
class Option:
    name: str  # the name used in config and load_profile()
    column: str  # the option's column in ps3.15-table-e.1-1.json
    code: str  # CID 7050 code value (scheme DCM)
    meaning: str  # CID 7050 code meaning, as in PS3.16


BASIC = Option("basic", "basicProfile", "113100", "Basic Application Confidentiality Profile")

# Order is the order of declaration in outputs (by code value), so the method text is stable.
OPTIONS: tuple[Option, ...] = (
    Option("clean_graphics", "cleanGraphOpt", "113103", "Clean Graphics Option"),
    Option("clean_structured_content", "cleanStructContOpt", "113104", "Clean Structured Content Option"),
    Option("clean_descriptors", "cleanDescOpt", "113105", "Clean Descriptors Option"),
    Option("retain_longitudinal_full_dates", "rtnLongFullDatesOpt", "113106",
           "Retain Longitudinal Temporal Information Full Dates Option"),
    Option("retain_longitudinal_modified_dates", "rtnLongModifDatesOpt", "113107",
           "Retain Longitudinal Temporal Information Modified Dates Option"),
    Option("retain_patient_characteristics", "rtnPatCharsOpt", "113108", "Retain Patient Characteristics Option"),
    Option("retain_device_identity", "rtnDevIdOpt", "113109", "Retain Device Identity Option"),
    Option("retain_uids", "rtnUIDsOpt", "113110", "Retain UIDs Option"),
    Option("retain_safe_private", "rtnSafePrivOpt", "113111", "Retain Safe Private Option"),
    Option("retain_institution_identity", "rtnInstIdOpt", "113112", "Retain Institution Identity Option"),
)
BY_NAME = {o.name: o for o in OPTIONS}

# 113101 Clean Pixel Data is not an option one turns on for every file: it is declared on exactly the files
# whose burned-in text was covered and proven gone (platform/pixel_text.yaml `on_text: redact`,
# imaging/deid/redact.py). 113102 Clean Recognizable Visual Features is not performed: such files are
# quarantined instead.
CLEAN_PIXEL_DATA = Option("clean_pixel_data", "cleanPixelOpt", "113101", "Clean Pixel Data Option")

# The research default (see docs/deidentification.md for why each is on and the others off).
RESEARCH_DEFAULT: tuple[str, ...] = (
    "clean_descriptors",
    "retain_longitudinal_modified_dates",
    "retain_patient_characteristics",
    "retain_safe_private",
)

FULL_DATES = "retain_longitudinal_full_dates"
MODIFIED_DATES = "retain_longitudinal_modified_dates"
