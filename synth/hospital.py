"""A deterministic synthetic eye hospital: DICOM landing zone plus clinical extracts.

Used by the demo, the tests and the benchmarks. `generate_hospital` writes

    <landing>/images/<site>/<YYYY-MM-DD>/<any depth>/<file>   DICOM Part 10 (+ some junk)
    <landing>/clinical/<site>/<YYYY-MM-DD>.csv                 that site-day's clinical extract
    <landing>/optouts/<site>/<YYYY-MM-DD>.csv                  an opt-out list, only with `optouts=N`

and returns a `HospitalSummary` with the ground truth (patients, instances, follow-up
references, broken files, as-of clinical records, every identifying string planted).
Same seed, byte-identical tree: no clock, no uuid4; UIDs and pixels derive from the seed.

Per site, given >= 2 patients and >= 2 dates, the plan guarantees:
  * slot 0 is seen on several dates; its second visit's extract omits it, so its as-of
    record for that image comes from an earlier day's extract;
  * the last slot is imaged once and has no record on or before that date (its record
    arrives in the next day's extract, if any);
  * records change between days (acuity, notes, sometimes the diagnosis);
  * extracts also hold patients who are never imaged;
  * from the second site on, two slots are the same people (same NHS number) as two
    slots of the previous site.

The parts live in `synth.*`: people, clinical (extracts), images (layouts and
studies), spec/dicom/pixels/junk (file contents) and truth (the summary types).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from synth.clinical import DIAGNOSES, SITE_A_COLUMNS, SITE_B_COLUMNS, write_clinical
from synth.images import ImageWriter
from synth.optouts import write_small_list
from synth.people import cast
from synth.spec import SiteHeader
from synth.truth import HospitalSummary, InstanceTruth, PatientTruth

__all__ = ["DIAGNOSES", "SITE_A_COLUMNS", "SITE_B_COLUMNS", "HospitalSummary", "InstanceTruth", "PatientTruth",
           "generate_hospital", "main"]


def _visit_days(slot: int, site_index: int, n: int, m: int) -> list[int]:
    """Date indexes a slot is imaged on: slot 0 always starts on day 0 and returns; even
    slots return (every 4th twice); the last slot comes once."""
    first = 0 if slot == 0 else (slot + site_index) % m
    count = 1 if (slot == n - 1 and n > 1) else 3 if slot % 4 == 0 else 2 if slot % 2 == 0 else 1
    return list(range(first, min(m, first + count)))


def generate_hospital(landing, *, seed=7, sites=("site-a", "site-b"),
                      dates=("2024-03-01", "2024-03-02", "2024-03-03"), patients_per_site=6,
                      oct_shape=(8, 64, 64), fundus_shape=(64, 64),
                      broken_per_partition=True, optouts=0) -> HospitalSummary:
    """Write a synthetic eye hospital under `landing` and return its ground truth.

    `optouts`: that many imaged patients of the first site on an opt-out list received on the first day
    (`summary.opted_out`), with one placeholder row; none by default.

    Overwrites the files it writes but deletes nothing: use a fresh directory when
    byte-identical trees matter. Dates are ISO strings, processed in sorted order.
    """
    root, sites, dates = Path(landing), list(sites), sorted(dates)
    rng, n, m = random.Random(seed), patients_per_site, len(dates)
    summary = HospitalSummary(str(root), seed, sites, dates)
    for key in ((day, site) for day in dates for site in sites):  # every partition, even if empty
        summary.dicom_files[key], summary.broken_files[key] = [], []
    slots, others, summary.patients = cast(rng, sites, n)
    headers = [SiteHeader.for_site(seed, si) for si in range(len(sites))]
    for h in headers:
        staff = (h.referring, h.performing, h.operator)
        summary._identifiers |= {h.institution, h.address, h.station, h.serial, *staff}
        summary._identifiers |= {pn.split("^")[0] for pn in staff}

    writer = ImageWriter(root, seed, summary, oct_shape, fundus_shape)
    visits = [[_visit_days(k, si, n, m) for k in range(n)] for si in range(len(sites))]
    plans: dict[tuple[int, int], dict] = {}  # drawn at the first visit, repeated at follow-ups
    for d, day in enumerate(dates):
        for si, site in enumerate(sites):
            for k, person in enumerate(slots[si]):
                if d in visits[si][k]:
                    if (si, k) not in plans:
                        plans[(si, k)] = {"eyes": rng.choice([("R", "L"), ("R", "L"), ("R",), ("L",)]),
                                          "modalities": ("OPT", "OP") if rng.random() < 0.6 else ("OPT",)}
                        person.imaged_sites.append(site)
                    writer.visit(rng, site, si, headers[si], day, person, plans[(si, k)])
            if broken_per_partition:
                writer.junk(day, site)
    for si, site in enumerate(sites):
        write_clinical(rng, root, summary, si, site, slots[si], visits[si], others[si])
    for files in (*summary.dicom_files.values(), *summary.broken_files.values()):
        files.sort()
    if optouts:
        summary.opted_out = write_small_list(root, summary, optouts, seed)
    return summary


# ----------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synth", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="landing directory to write")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sites", default="site-a,site-b", help="comma-separated site names")
    parser.add_argument("--dates", default="2024-03-01,2024-03-02,2024-03-03", help="comma-separated ISO dates")
    parser.add_argument("--patients", type=int, default=6, help="patients per site")
    parser.add_argument("--oct-shape", default="8,64,64", help="frames,rows,cols")
    parser.add_argument("--fundus-shape", default="64,64", help="rows,cols")
    parser.add_argument("--no-broken", action="store_true", help="skip the junk files")
    parser.add_argument("--optouts", type=int, default=0,
                        help="imaged patients of the first site on an opt-out list received on the first day")
    args = parser.parse_args(argv)
    split = lambda text: [t.strip() for t in text.split(",") if t.strip()]  # noqa: E731
    summary = generate_hospital(
        args.out, seed=args.seed, sites=split(args.sites), dates=split(args.dates),
        patients_per_site=args.patients, oct_shape=tuple(map(int, split(args.oct_shape))),
        fundus_shape=tuple(map(int, split(args.fundus_shape))), broken_per_partition=not args.no_broken,
        optouts=args.optouts)
    # Counts only: never print identifiers.
    by_modality = {m: sum(i.modality == m for i in summary.instances) for m in ("OPT", "OP")}
    print(f"wrote {len(summary.instances)} DICOM files ({by_modality['OPT']} OPT, {by_modality['OP']} OP), "
          f"{sum(map(len, summary.broken_files.values()))} broken files, "
          f"{sum(summary.clinical_rows.values())} clinical rows in {len(summary.clinical_rows)} extracts")
    print(f"{len(summary.patients)} patients, {len(summary.sites)} sites x {len(summary.dates)} dates, "
          f"{sum(i.referenced_sop_instance_uid is not None for i in summary.instances)} follow-up images, "
          f"{len(summary.unmatched_images)} images without an as-of clinical record -> {args.out}")
    if summary.opted_out:
        print(f"an opt-out list of {len(summary.opted_out)} imaged patients (and one placeholder row) "
              f"received on {summary.dates[0]} at {summary.sites[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
