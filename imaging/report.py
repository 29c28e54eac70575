"""What a run made and where: counts only, never a value from the data.

`python -m imaging.report` reads the warehouse with pyarrow (no Spark start-up) and checks
every published release against its SHA256SUMS.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.dataset as ds

from imaging.config import load_settings
from imaging.release import verify_release


def rows(path: Path) -> int:
    if not path.exists():
        return 0
    return ds.dataset(path, format="parquet", partitioning="hive").count_rows()


def main() -> int:
    settings = load_settings()
    ident, deid = Path(settings.identifiable), Path(settings.deidentified)
    print(f"Warehouse: {settings.warehouse}")
    print("  identifiable/ (restricted)")
    for table in ("raw_image_index", "quarantine/raw_image_index", "quarantine/clinical_extracts",
                  "linked_patient_metadata", "anonymization_ledger", "quarantine/anonymized_images"):
        print(f"    {table:32s} {rows(ident / table):6d} rows")
    files = list((deid / "anonymized_images/files").rglob("*.dcm"))
    print("  deidentified/ (releasable)")
    print(f"    {'anonymized_images/files':32s} {len(files):6d} DICOM files")
    print(f"    {'anonymized_images/manifest':32s} {rows(deid / 'anonymized_images/manifest'):6d} rows")
    failed = 0
    for release in sorted((deid / "cohorts").glob("*/*")):
        problems = verify_release(str(release))
        failed += bool(problems)
        images = len(list((release / "images").rglob("*.dcm")))
        state = "verified against SHA256SUMS" if not problems else f"{len(problems)} problems"
        print(f"    cohorts/{release.parent.name}/{release.name}: {images} images, {state}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
