"""Every file under platform/ is read into a pydantic model (imaging/config_files.py reads them, the models
live with their domains, imaging/driver/platform_files.py maps one to the other): the shipped files load,
and a mistake in any of them is a ConfigError naming the file, the field and what is allowed, raised when
`definitions` is imported, before anything else loads. No Spark, no Dagster, no mocks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from imaging.config_files import DEFAULT_PLATFORM_DIR
from imaging.config_model import ConfigError
from imaging.driver.platform_files import FILES, load_cohort_files, load_file, load_platform
from imaging.governance.cohort import CohortFile
from imaging.steps.declared import QUALITY_CHECKS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def platform(tmp_path) -> Path:
    """A copy of the shipped platform/ folder to break."""
    copy = tmp_path / "platform"
    shutil.copytree(DEFAULT_PLATFORM_DIR, copy, ignore=shutil.ignore_patterns("*.sh", "proxy", "*.py"))
    return copy


def edit(folder: Path, name: str, change) -> None:
    """Parse a file of the copy, let `change` edit the data, write it back."""
    path = folder / name
    data = json.loads(path.read_text()) if name.endswith(".json") else yaml.safe_load(path.read_text())
    change(data)
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data, sort_keys=False))


def problems(folder: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_platform(folder)
    return str(caught.value)


def test_every_shipped_file_loads():
    files = load_platform()
    assert set(FILES) <= {p.name for p in DEFAULT_PLATFORM_DIR.iterdir()}
    assert {c.name for c in files.cohorts} == {"amd-oct", "all-fundus"}
    assert set(files.suites) == {"raw_image_index.json", "linked_patient_metadata.json", "anonymized_images.json"}
    assert files.platform.files_per_task == 64 and files.clinical_policy.disclosure.min_k == 5
    assert files.spark.root["spark.sql.shuffle.partitions"] == "8"
    for asset, checks in QUALITY_CHECKS.items():
        assert set(type(getattr(files.quality.checks, asset)).model_fields) == set(checks)
    assert load_file("cohorts/amd_oct.yaml").age_at_scan.min == 50


def test_the_declared_checks_are_the_ones_evaluated():
    """Each step's declared per-run checks are the ones its asset's Spark figures compute, its table-wide
    checks the ones the multi-asset checks evaluate; QUALITY_CHECKS (what quality.yaml must configure)
    is the declarations'."""
    from assets import anonymized_images, linked_patient_metadata, raw_image_index
    from assets.checks import TABLE_CHECKS
    from assets.runner import _names
    from imaging.steps.declared import ANONYMIZE, CHECKS, IMAGE_STEPS, INDEX, LINK

    for module, step in ((raw_image_index, INDEX), (linked_patient_metadata, LINK), (anonymized_images, ANONYMIZE)):
        assert sorted(_names(module.FIGURES)) == sorted(c.name for c in step.per_run), step.asset
    evaluated = {(key.asset_key.to_user_string(), key.name) for c in TABLE_CHECKS for key in c.check_keys}
    assert evaluated == {(s.asset, name) for s in IMAGE_STEPS for name in s.table_wide}
    assert QUALITY_CHECKS == {asset: {c.name: c.kind for c in checks} for asset, checks in CHECKS.items()}


def test_a_step_whose_figures_miss_a_declared_check_is_refused():
    from assets.raw_image_index import FIGURES
    from assets.runner import Body, image_asset
    from imaging.steps.declared import INDEX

    fewer = {k: v for k, v in FIGURES.items() if k != "files_accounted"}
    with pytest.raises(ValueError, match="raw_image_index: FIGURES compute"):
        image_asset(INDEX, Body(idle=lambda run: True, work=lambda run: None), fewer)


# (file, change, the line the error must contain): (a) an unknown key, (b) a wrong type, (c) a missing field.
CASES = {
    "platform.yaml": [
        (lambda d: d.update(site="x"), "platform/platform.yaml: site: unknown key; allowed: start_date, sites,"),
        (lambda d: d.update(files_per_task="64"), "platform/platform.yaml: files_per_task: must be a whole number (got '64')"),
        (lambda d: d.pop("sites"), "platform/platform.yaml: sites: missing (required)"),
        (lambda d: d.update(sites=["site a"]), "platform/platform.yaml: sites[0]: must match ^[A-Za-z0-9_-]+$"),
        (lambda d: d.update(deid_options=["retain_all"]), "platform/platform.yaml: deid_options[0]: must be 'clean_graphics'"),
    ],
    "issuers.yaml": [
        (lambda d: d.update(default_issuer="NHS"), "platform/issuers.yaml: default_issuer: unknown key; allowed: sites, default_namespace, aliases"),
        (lambda d: d["sites"].update({"site-a": 7}), "platform/issuers.yaml: sites.site-a: must be a string (quote it in YAML) (got 7)"),
        (lambda d: [d.pop("sites"), d.pop("default_namespace")], "platform/issuers.yaml: (the file): no site has a namespace"),
        (lambda d: d["aliases"].update({83: "NHS"}), "platform/issuers.yaml: aliases[83]: key must be a string (quote it in YAML) (got 83)"),
    ],
    "pixel_text.yaml": [  # every key has the engine's default: nothing is required
        (lambda d: d.update(min_confidance=50), "platform/pixel_text.yaml: min_confidance: unknown key; allowed: min_confidence,"),
        (lambda d: d.update(frame_sample="3"), "platform/pixel_text.yaml: frame_sample: must be a whole number (got '3')"),
        (lambda d: d.update(thresholding=["magic"]), "platform/pixel_text.yaml: thresholding[0]: must be 'otsu', 'adaptive_otsu' or 'sauvola'"),
    ],
    "quality.yaml": [
        (lambda d: d["checks"]["raw_image_index"].update(scans_per_doctor={"severity": "WARN", "max": 1, "description": "x"}),
         "platform/quality.yaml: checks.raw_image_index.scans_per_doctor: unknown key; allowed: scans_per_patient_site_day,"),
        (lambda d: d["checks"]["raw_image_index"]["scans_per_patient"].update(max="5000"),
         "platform/quality.yaml: checks.raw_image_index.scans_per_patient.max: must be a number (got '5000')"),
        (lambda d: d["checks"]["anonymized_images"].pop("manifest_files"),
         "platform/quality.yaml: checks.anonymized_images.manifest_files: missing (required)"),
        (lambda d: d["checks"]["published_cohort"]["release_checksums"].pop("severity"),
         "platform/quality.yaml: checks.published_cohort.release_checksums.severity: missing (required)"),
        (lambda d: d["checks"]["linked_patient_metadata"]["unlinked_share"].update(severity="warn"),
         "platform/quality.yaml: checks.linked_patient_metadata.unlinked_share.severity: must be 'ERROR' or 'WARN' (got 'warn')"),
        (lambda d: d["checks"]["raw_image_index"]["files_accounted"].update(max=0),
         "platform/quality.yaml: checks.raw_image_index.files_accounted.max: unknown key; allowed: severity, description"),
        (lambda d: d["checks"]["raw_image_index"]["column_rules"].update(suite="nothing.json"),
         "platform/quality.yaml: checks.raw_image_index.column_rules.suite: no file expectations/nothing.json"),
    ],
    "clinical_policy.yaml": [
        (lambda d: d["disclosure"].update(mink=3), "platform/clinical_policy.yaml: disclosure.mink: unknown key; allowed: min_k, suppress_below"),
        (lambda d: d["disclosure"].update(min_k="5"), "platform/clinical_policy.yaml: disclosure.min_k: must be a whole number (got '5')"),
        (lambda d: d["columns"]["sex"].pop("action"), "platform/clinical_policy.yaml: columns.sex.action: missing (required)"),
        (lambda d: d["disclosure"].update(min_k=0), "platform/clinical_policy.yaml: disclosure.min_k: must be >= 1 (got 0)"),
        (lambda d: d["quasi_identifiers"].append("notes"), "platform/clinical_policy.yaml: quasi_identifiers: 'notes' is not a released column"),
        (lambda d: d["columns"]["iop_mmhg"].pop("number"), "platform/clinical_policy.yaml: columns.iop_mmhg: 'keep' needs a pattern or a number range"),
    ],
    "cohorts/amd_oct.yaml": [
        (lambda d: d.update(sql="1=1"), "platform/cohorts/amd_oct.yaml: sql: unknown key; allowed: name, version, description,"),
        (lambda d: d.update(version="1"), "platform/cohorts/amd_oct.yaml: version: must be a whole number (got '1')"),
        (lambda d: d.pop("version"), "platform/cohorts/amd_oct.yaml: version: missing (required)"),
        (lambda d: d.update(lateralities=["R", "X"]), "platform/cohorts/amd_oct.yaml: lateralities[1]: must be 'R', 'L', 'B' or 'U' (got 'X')"),
        (lambda d: d.update(name="../amd"), "platform/cohorts/amd_oct.yaml: name: must match ^[a-z0-9][a-z0-9-]{0,62}$ (got '../amd')"),
        (lambda d: d.update(version=0), "platform/cohorts/amd_oct.yaml: version: must be >= 1 (got 0)"),
        (lambda d: d.update(name="all-fundus"), "platform/cohorts/amd_oct.yaml: name: 'all-fundus' is also the name in cohorts/all_fundus.yaml"),
    ],
    "expectations/raw_image_index.json": [
        (lambda d: d["expectations"][0].update(kwarg={}), "platform/expectations/raw_image_index.json: expectations[0].kwarg: unknown key; allowed: type, kwargs, severity"),
        (lambda d: d["expectations"][1].update(kwargs="date"), "platform/expectations/raw_image_index.json: expectations[1].kwargs: must be a mapping of key: value (got 'date')"),
        (lambda d: d["expectations"][2].pop("type"), "platform/expectations/raw_image_index.json: expectations[2].type: missing (required)"),
        (lambda d: d.update(name="index"), "platform/expectations/raw_image_index.json: name: must be 'raw_image_index', the file's name"),
        (lambda d: d["expectations"][0].update(type="expect_column_values_to_be_unique"),
         "platform/expectations/raw_image_index.json: expectations[0].type: must be a row-wise GX expectation"),
    ],
    "spark.yaml": [  # Spark's own property names: any spark.* key, each value a string; none required
        (lambda d: d.update(master="local[2]"), "platform/spark.yaml: master: key must match ^spark\\."),
        (lambda d: d.update({"spark.sql.shuffle.partitions": 8}), "platform/spark.yaml: spark.sql.shuffle.partitions: must be a string (quote it in YAML) (got 8)"),
    ],
}


@pytest.mark.parametrize("name,change,expected", [(name, change, expected) for name, cases in CASES.items()
                                                   for change, expected in cases],
                         ids=[f"{name}-{i}" for name, cases in CASES.items() for i in range(len(cases))])
def test_a_mistake_names_the_file_the_field_and_what_is_allowed(platform, name, change, expected):
    edit(platform, name, change)
    message = problems(platform)
    assert expected in message, message
    assert "Traceback" not in message and "pydantic" not in message.lower()
    # One file, loaded alone, says the same (unless the mistake is between files).
    if not any(across in expected for across in ("also the name", "no file", "the file's name")):
        with pytest.raises(ConfigError, match=re.escape(expected.split(": ", 1)[1][:40])):
            load_file(name, platform)


def test_every_mistake_of_every_file_is_reported_at_once(platform):
    edit(platform, "platform.yaml", lambda d: d.update(files_per_task=0))
    edit(platform, "cohorts/all_fundus.yaml", lambda d: d.update(version="one", modalities=["op"]))
    edit(platform, "quality.yaml", lambda d: d.update(top_offenders=None))
    message = problems(platform)
    assert message.startswith("4 problems in the platform configuration:")
    for line in ("platform/platform.yaml: files_per_task: must be >= 1 (got 0)",
                 "platform/cohorts/all_fundus.yaml: version: must be a whole number (got 'one')",
                 "platform/cohorts/all_fundus.yaml: modalities[0]: must match",
                 "platform/quality.yaml: top_offenders: must be a whole number (got None)"):
        assert line in message, message


def test_a_cohort_without_version_and_one_with_laterality_x(platform):
    (platform / "cohorts" / "amd_oct.yaml").write_text("name: amd-oct\nmodalities: [OPT]\n")
    (platform / "cohorts" / "all_fundus.yaml").write_text("name: all-fundus\nversion: 1\nlateralities: [X]\n")
    with pytest.raises(ConfigError) as caught:
        load_cohort_files(platform)
    assert caught.value.problems == [
        f"{platform}/cohorts/all_fundus.yaml: lateralities[0]: must be 'R', 'L', 'B' or 'U' (got 'X')",
        f"{platform}/cohorts/amd_oct.yaml: version: missing (required)",
    ]
    assert isinstance(caught.value, ValueError)  # callers that catch ValueError still do


def test_unparseable_and_missing_files_are_named(platform):
    (platform / "issuers.yaml").write_text("sites: [site-a\n")
    (platform / "spark.yaml").unlink()
    message = problems(platform)
    assert "platform/issuers.yaml: not valid YAML:" in message and "line 1" in message
    assert "platform/spark.yaml: file not found" in message


def test_the_models_keep_what_the_files_say():
    cohort = CohortFile.model_validate({"name": "x", "version": 3, "lateralities": ["L"], "age_at_scan": {"max": 9}})
    assert cohort.version == 3 and cohort.lateralities == ["L"] and cohort.age_at_scan.min is None
    assert load_file("pixel_text.yaml").pass_max_side == {"adaptive_otsu": 1024}


def test_importing_definitions_with_a_broken_cohort_fails_at_once_without_spark(platform):
    """The code location refuses to load, naming the file and field, before pyspark is even imported
    (so no Spark session, no JVM): what `dagster asset materialize -m definitions`, `dg check defs` and the
    webserver show."""
    (platform / "cohorts" / "amd_oct.yaml").write_text("name: amd-oct\nlateralities: [R, X]\n")
    env = {**os.environ, "IMAGING_PLATFORM_DIR": str(platform)}
    env.pop("IMAGING_PSEUDONYM_KEY", None)
    script = ("import sys\ntry:\n    import definitions\n"
              "finally:\n    print('pyspark imported:', 'pyspark' in sys.modules, file=sys.stderr)\n")
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    elapsed = time.monotonic() - started
    assert run.returncode != 0
    assert f"{platform}/cohorts/amd_oct.yaml: version: missing (required)" in run.stderr
    assert f"{platform}/cohorts/amd_oct.yaml: lateralities[1]: must be 'R', 'L', 'B' or 'U' (got 'X')" in run.stderr
    assert "ConfigError" in run.stderr and "pyspark imported: False" in run.stderr
    assert "SparkContext" not in run.stderr and "log4j" not in run.stderr
    assert elapsed < 20, elapsed  # a JVM alone takes seconds; this fails before dagster is imported
