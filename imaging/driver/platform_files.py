"""Which model reads each file under `platform/`, the rules across files, and the domain objects loaded.

The one module that knows every file: each model lives with the domain that owns its file (the clinical
policy's in `imaging.steps.clinical`, the issuers' in `imaging.issuers`, ...), `imaging.config_files`
reads the files and gathers their problems, and this module hands it the map. `definitions.py` calls
`load_platform()` before it imports anything else, so a mistake in any file stops the code location at
load, naming the file and the field, before a Spark session could start. Driver-side (it imports
`imaging.governance` for the cohorts); the executors are handed domain objects, never files.

    files = load_platform()                       # every file, all errors of all files at once
    cohort = load_file("cohorts/amd_oct.yaml")    # one file -> its model
    policy = load_clinical_policy()               # platform/clinical_policy.yaml -> ClinicalPolicy
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from imaging import config_files
from imaging.clinical_source import ClinicalSourceFile
from imaging.deid.pixel_text import PixelTextFile
from imaging.driver.config import PlatformFile, SparkFile
from imaging.pacs.settings import PacsFile
from imaging.ui import FILE as UI_FILE, UiFile
from imaging.governance.cohort import CohortDefinition, CohortFile
from imaging.issuers import IssuersFile
from imaging.quality.expectations import SuiteFile
from imaging.quality.rules import QualityRules
from imaging.steps.clinical import ClinicalPolicy, ClinicalPolicyFile
from imaging.steps.declared import QualityFile

__all__ = ["FILES", "MODELS", "PlatformFiles", "load_clinical_policy", "load_cohort_files", "load_cohorts",
           "load_file", "load_platform", "load_quality_rules", "model_for"]

# Every file the platform reads, by its path relative to the platform folder; a pattern names each file
# of a folder (none is fine).
FILES: dict[str, type] = {
    "platform.yaml": PlatformFile,
    "issuers.yaml": IssuersFile,
    "pixel_text.yaml": PixelTextFile,
    "quality.yaml": QualityFile,
    "clinical_policy.yaml": ClinicalPolicyFile,
    "spark.yaml": SparkFile,
    "pacs.yaml": PacsFile,
    UI_FILE: UiFile,
}
COHORTS, SUITES = "cohorts/*.yaml", "expectations/*.json"
CLINICAL_SOURCES = "clinical_sources/*.yaml"  # shipped examples of IMAGING_CLINICAL_SOURCE (OMOP CDM, OpenEyes)
MODELS: dict[str, type] = {**FILES, COHORTS: CohortFile, SUITES: SuiteFile, CLINICAL_SOURCES: ClinicalSourceFile}


def model_for(name: str) -> type:
    """The model of a file, by its path relative to the platform folder."""
    return config_files.model_for(MODELS, name)


def load_file(name: str, directory: str | Path | None = None) -> Any:
    """One platform file (`quality.yaml`, `cohorts/amd_oct.yaml`, ...) as its model."""
    return config_files.load_as(model_for(name), name, directory)


# --- rules across files -------------------------------------------------------------------------------------

def unique_cohort_names(files: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Two cohort definitions may not share a name (it is the release's folder)."""
    owners: dict[str, str] = {}
    for name, cohort in files.items():
        if not isinstance(cohort, CohortFile):
            continue
        if cohort.name in owners:
            yield name, (f"name: {cohort.name!r} is also the name in {owners[cohort.name]}; cohort names must "
                         f"be unique")
        owners.setdefault(cohort.name, name)


def suites_named_as_files(files: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """A suite's `name` is its file's name without `.json`."""
    for name, suite in files.items():
        stem = Path(name).stem
        if isinstance(suite, SuiteFile) and suite.name != stem:
            yield name, f"name: must be {stem!r}, the file's name (got {suite.name!r})"


def quality_suites_exist(files: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Each check of quality.yaml that runs a suite names a file of expectations/."""
    quality = files.get("quality.yaml")
    if quality is None:
        return
    suites = sorted(Path(n).name for n in files if n.startswith("expectations/"))
    for asset, checks in quality.checks:
        for check, rule in checks:
            suite = getattr(rule, "suite", None)
            if suite is not None and suite not in suites:
                yield "quality.yaml", (f"checks.{asset}.{check}.suite: no file expectations/{suite}; allowed: "
                                       f"{', '.join(suites) or 'none'}")


def stamps_are_release_columns(files: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """A cohort's `stamp:` names columns its release holds, no finer than the quasi-identifiers allow."""
    from imaging.governance.disclosure import DisclosurePolicy
    from imaging.governance.lineage import release_column_types, stamp_problems

    policy, platform = files.get("clinical_policy.yaml"), files.get("platform.yaml")
    stamped = {n: c for n, c in files.items() if isinstance(c, CohortFile) and c.stamp}
    if policy is None or platform is None or not stamped:
        return
    disclosure = DisclosurePolicy.from_model(policy)
    types = release_column_types(ClinicalPolicy.from_model(policy), platform.deid_options, disclosure)
    for name, cohort in stamped.items():
        for problem in stamp_problems(cohort.stamp, types, disclosure):
            yield name, f"stamp: {problem}"



def cohort_eye_fields_released(files: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """A cohort selects on eye fields the clinical policy releases per eye (`eye: true`, not dropped)."""
    policy = files.get("clinical_policy.yaml")
    if policy is None:
        return
    released = ClinicalPolicy.from_model(policy)
    fields = sorted(r.name for r in released.eye_rules)
    for name, cohort in files.items():
        if isinstance(cohort, CohortFile) and cohort.eye is not None:
            for field in sorted(cohort.eye.fields):
                if field not in fields:
                    yield name, (f"eye.fields.{field}: not an eye field of clinical_policy.yaml (columns marked "
                                 f"`eye: true`): {', '.join(fields) or 'none'}")
            if cohort.eye.diagnosis_code_prefixes and released.eye_diagnosis_rule is None:
                yield name, ("eye.diagnosis_code_prefixes: clinical_policy.yaml releases no diagnoses per eye "
                             "(diagnosis_code with `eye: true`)")


CHECKS = (unique_cohort_names, suites_named_as_files, quality_suites_exist, cohort_eye_fields_released,
          stamps_are_release_columns)


# --- every file ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PlatformFiles:
    """Every configuration file of a platform folder, validated."""

    platform: PlatformFile
    issuers: IssuersFile
    pixel_text: PixelTextFile
    quality: QualityFile
    clinical_policy: ClinicalPolicyFile
    spark: SparkFile
    pacs: PacsFile
    cohorts: tuple[CohortFile, ...]
    suites: Mapping[str, SuiteFile]  # file name (raw_image_index.json) -> suite


def load_platform(directory: str | Path | None = None) -> PlatformFiles:
    """Validate every file the platform reads; one ConfigError lists the problems of all of them."""
    files = config_files.load_all(MODELS, directory, CHECKS)
    return PlatformFiles(platform=files["platform.yaml"], issuers=files["issuers.yaml"],
                         pixel_text=files["pixel_text.yaml"], quality=files["quality.yaml"],
                         clinical_policy=files["clinical_policy.yaml"], spark=files["spark.yaml"],
                         pacs=files["pacs.yaml"],
                         cohorts=tuple(m for n, m in files.items() if n.startswith("cohorts/")),
                         suites={Path(n).name: m for n, m in files.items() if n.startswith("expectations/")})


def load_cohort_files(directory: str | Path | None = None) -> list[CohortFile]:
    """Every `cohorts/*.yaml`, in name order; two definitions may not share a cohort name."""
    return list(config_files.load_all({COHORTS: CohortFile}, directory, (unique_cohort_names,)).values())


# --- the domain objects, from their files ---------------------------------------------------------------------

def load_clinical_policy(directory: str | Path | None = None) -> ClinicalPolicy:
    """The deployment's clinical policy, `platform/clinical_policy.yaml`."""
    return ClinicalPolicy.from_model(load_file("clinical_policy.yaml", directory))


def load_quality_rules(directory: str | Path | None = None) -> QualityRules:
    """The rules of `platform/quality.yaml`, with the suites of `platform/expectations/` (its checks name them)."""
    files = config_files.load_all({"quality.yaml": QualityFile, SUITES: SuiteFile}, directory,
                                  (suites_named_as_files, quality_suites_exist))
    suites = {Path(n).name: m.model_dump() for n, m in files.items() if n.startswith("expectations/")}
    return QualityRules.from_model(files["quality.yaml"], suites)


def load_cohorts(directory: str | Path | None = None) -> list[CohortDefinition]:
    """Every cohort definition of `platform/cohorts/`, validated; names are unique."""
    return [CohortDefinition.from_model(c) for c in load_cohort_files(directory)]
