"""What a run made and where: counts only, never a value from the data.

`python -m imaging.governance.report` reads the warehouse with pyarrow (no Spark start-up), table by table
from the catalogue, and checks every published release against its SHA256SUMS.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.dataset as ds

from imaging.catalogue import (ANONYMIZED_FILES, COHORTS, DEIDENTIFIED, HELD, IDENTIFIABLE, RELEASE_OBJECTS, TABLES,
                               manifest)
from imaging.driver.config import load_settings
from imaging.driver.platform_files import load_clinical_policy
from imaging.governance.approval import DecisionText, approval_copy, list_held, manifest_id
from imaging.governance.bundle import verify_release
from imaging.governance.retention import ENDED


def rows(path: Path) -> int:
    if not path.exists():
        return 0
    return ds.dataset(path, format="parquet", partitioning="hive").count_rows()


def optouts_line(release: Path) -> str:
    """What a release's data card says about opt-outs (its counts as published: small ones suppressed)."""
    import json

    card = json.loads((release / "datacard.json").read_text()) if (release / "datacard.json").exists() else {}
    section = card.get("optouts")
    if section is None:
        return "opt-outs: not recorded in its data card"
    held, left = section["not_deidentified"], section["excluded_at_build"]
    lists = len(section["lists"])
    return (f"opt-outs: {lists} list{'s' if lists != 1 else ''} applied (received up to {section['as_of'] or '-'}); "
            f"never de-identified: {held['images']} images of {held['patients']} patients; left out at build: "
            f"{left['images']} images of {left['patients']} patients")


def main() -> int:
    root = Path(load_settings().warehouse)
    print(f"Warehouse: {root}")
    print(f"  {IDENTIFIABLE}/ (restricted)")
    for table in (t for t in TABLES if t.zone == IDENTIFIABLE):
        print(f"    {table.name:32s} {rows(root / table.path):6d} rows")
    held = list_held(str(root))
    waiting = sum(1 for h in held if h.standing is None or not h.standing.approved)
    print(f"    {HELD.name:32s} {len(held):6d} releases ({waiting} awaiting approval: imaging-review pending)")
    print(f"  {DEIDENTIFIED}/ (releasable)")
    files = list((root / ANONYMIZED_FILES.path).rglob("*.dcm"))
    print(f"    {ANONYMIZED_FILES.name:32s} {len(files):6d} DICOM files")
    table = manifest(load_clinical_policy())
    print(f"    {table.name:32s} {rows(root / table.path):6d} rows")
    objects = [p for p in (root / RELEASE_OBJECTS.path).glob("*/*.dcm")]
    print(f"    {RELEASE_OBJECTS.name:32s} {len(objects):6d} released images stored once "
          f"({sum(p.stat().st_size for p in objects) / 1e6:.1f} MB; versions hold links to them)")
    failed = 0
    for release in sorted((root / COHORTS.path).glob("*/*")):
        if (release / ENDED).exists():  # withdrawn or expired: its record alone stays
            import json

            record = json.loads((release / ENDED).read_text())
            print(f"    {COHORTS.name}/{release.parent.name}/{release.name}: {record.get('event')} at "
                  f"{record.get('at')} ({record.get('reason')}), release id {record.get('release_id')}")
            continue
        problems = verify_release(str(release))
        failed += bool(problems)
        images = len(list((release / "images").rglob("*.dcm")))
        state = "verified against SHA256SUMS" if not problems else f"{len(problems)} problems"
        carried = approval_copy(str(release))
        # Who signed, as the copy says; `imaging-review` verifies the signatures against the allowed signers.
        names = sorted({DecisionText.parse(d.message.encode()).principal for d in carried or []})
        approved = f", signed approvals by {', '.join(names)}" if names else ", NO APPROVAL"
        print(f"    {COHORTS.name}/{release.parent.name}/{release.name}: {images} images, {state}{approved}, "
              f"release id {manifest_id(str(release))}")
        print(f"      {optouts_line(release)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
