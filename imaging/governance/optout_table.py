"""One opt-out table per cohort version: the same rows and numbers in its Markdown review, its materialization's
metadata and its HTML review (the one the run writes and the proxy serves).

Each row says exactly what it counts, so no two numbers seem to disagree:

- held back before release, never de-identified: images (and their patients) quarantined as "patient opted out"
  by anonymized_images, over every site-day (a cohort cannot select an image that was never de-identified);
- held back before release, left out of this version: de-identified images of patients on the list in force at
  the build that the cohort's selection held, left out of this version;
- released in this version, opted out since: patients of this (published) version on the list now;
- withdrawn since release: images of this version whose de-identified files were withdrawn from the de-identified
  zone since (their patient opted out; their ledger rows are in withdrawn_images).

Counts only, exact (the UI and the served review are behind the login; the data card publishes them suppressed
below `suppress_below`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

NEVER = "held back before release: never de-identified (every site-day)"
LEFT_OUT = "held back before release: left out of this version at its build"
SINCE = "released in this version: opted out since"
WITHDRAWN = "withdrawn from the de-identified zone since release (images of this version)"


@dataclass(frozen=True)
class OptOutRow:
    what: str
    images: int | None  # None: not counted this way (a patient count only)
    patients: int | None  # None: not counted this way (an image count only)


@dataclass(frozen=True)
class OptOutTable:
    cohort: str
    version: int
    rows: tuple[OptOutRow, ...]

    @classmethod
    def of(cls, cohort: str, version: int, *, never: tuple[int, int], left_out: tuple[int, int], since: int,
           withdrawn: int) -> "OptOutTable":
        return cls(cohort, version, (OptOutRow(NEVER, *never), OptOutRow(LEFT_OUT, *left_out),
                                     OptOutRow(SINCE, None, since), OptOutRow(WITHDRAWN, withdrawn, None)))

    @property
    def title(self) -> str:
        return f"Opt-outs of {self.cohort} v{self.version}"

    def cells(self) -> list[list[str]]:
        """Rows as text: what, images, patients ("-" where a row does not count that way)."""
        return [[r.what, "-" if r.images is None else str(r.images), "-" if r.patients is None else str(r.patients)]
                for r in self.rows]

    def markdown(self) -> list[str]:
        return [f"### {self.title}", "", "| | images | patients |", "|---|---:|---:|",
                *(f"| {what} | {images} | {patients} |" for what, images, patients in self.cells()), ""]

    def records(self) -> list[dict]:
        """For the materialization's `optout_table` (one record per row, counts or None)."""
        return [{"what": r.what, "images": r.images, "patients": r.patients} for r in self.rows]
