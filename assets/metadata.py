"""Dagster metadata from a `imaging.run_summary.StepSummary`: what every materialization reports.

Numbers under the same keys on every run (so the UI plots them), a Markdown summary table, and
output paths relative to the warehouse root. Nothing identifying: no value from the data, no
absolute path, no real date or site in a de-identified path.
"""

from __future__ import annotations

from dagster import MetadataValue

from imaging.run_summary import StepSummary


def materialization_metadata(summary: StepSummary, title: str) -> dict[str, MetadataValue]:
    metadata: dict[str, MetadataValue] = {}
    for key, value in summary.numbers().items():
        metadata[key] = MetadataValue.int(value) if isinstance(value, int) else MetadataValue.float(float(value))
    metadata["summary"] = MetadataValue.md(summary.markdown(title))
    for name, path in summary.outputs.items():
        metadata[f"path/{name}"] = MetadataValue.text(path)
    return metadata
