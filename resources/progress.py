"""Live progress of long Spark work in the run's log, from Spark's own task counts.

    with progress.track(context.log, session, label="raw_image_index", files=listed, bytes=size):
        ...  # the Spark actions that open the files

A classic session (local or a cluster master) is polled through its status tracker, with the block's
jobs put in their own job group. A Spark Connect session has no SparkContext, so no status tracker:
there the client's progress handler (`registerProgressHandler`, fed by the server's execution
progress messages) supplies the same stage counts. Either way `imaging.driver.progress` turns counts into
at most one line every `interval_seconds`, and one closing line; nothing is logged per file.
"""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager
from typing import Iterator

from dagster import ConfigurableResource

from imaging.driver.progress import ProgressMeter, ProgressReport, StageCounts


def is_connect(session) -> bool:
    """True for a Spark Connect session (sc://), which has no SparkContext."""
    return type(session).__module__.startswith("pyspark.sql.connect")


class _StatusTrackerSource:
    """Stage counts of the block's jobs, read from a classic session's status tracker."""

    def __init__(self, session):
        self._context = session.sparkContext
        self._group = f"progress-{uuid.uuid4().hex[:12]}"
        self._previous = None

    def __enter__(self):
        # Job groups are thread-local (pinned threads): this tags the jobs of the calling thread only.
        self._previous = self._context.getLocalProperty("spark.jobGroup.id")
        self._context.setJobGroup(self._group, "tracked for progress", interruptOnCancel=False)
        return self

    def __exit__(self, *exc):
        if self._previous:
            self._context.setJobGroup(self._previous, "")
        else:
            self._context.setLocalProperty("spark.jobGroup.id", None)
            self._context.setLocalProperty("spark.job.description", None)

    def stages(self) -> list[StageCounts]:
        tracker = self._context.statusTracker()
        found = []
        for job_id in tracker.getJobIdsForGroup(self._group):
            job = tracker.getJobInfo(job_id)
            for stage_id in (job.stageIds if job else []):
                info = tracker.getStageInfo(stage_id)
                if info:
                    found.append(StageCounts(stage_id, info.numTasks, info.numCompletedTasks, info.numActiveTasks,
                                             info.numFailedTasks))
        return found


class _ConnectSource:
    """Stage counts pushed by a Spark Connect server with each operation's progress messages."""

    def __init__(self, session):
        self._session = session
        self._stages: dict[tuple[str | None, int], StageCounts] = {}
        self._lock = threading.Lock()

    def __call__(self, stages, inflight_tasks, operation_id, done) -> None:  # the ProgressHandler protocol
        with self._lock:
            for stage in stages or ():
                # Stage ids are only unique within an operation.
                key = (operation_id, stage.stage_id)
                self._stages[key] = StageCounts(hash(key) & 0x7FFFFFFF, stage.num_tasks, stage.num_completed_tasks)

    def __enter__(self):
        self._session.registerProgressHandler(self)
        return self

    def __exit__(self, *exc):
        self._session.removeProgressHandler(self)

    def stages(self) -> list[StageCounts]:
        with self._lock:
            return list(self._stages.values())


class SparkProgress(ConfigurableResource):
    """Writes live progress lines of long Spark steps to the run's log."""

    interval_seconds: float = 5.0
    poll_seconds: float = 1.0

    @contextmanager
    def track(self, log, session, *, label: str, files: int, bytes: int) -> Iterator[ProgressMeter]:
        """Log progress of the Spark work inside the block: `label` names the step, never the data."""
        meter = ProgressMeter(label, files, bytes, interval_s=self.interval_seconds)
        source = _ConnectSource(session) if is_connect(session) else _StatusTrackerSource(session)
        started = time.monotonic()
        stop = threading.Event()

        def emit(report: ProgressReport | None) -> None:
            if report is not None:
                log.info(report.message())

        def poll() -> None:
            while not stop.wait(self.poll_seconds):
                try:
                    emit(meter.update(source.stages(), time.monotonic() - started))
                except Exception as error:  # progress must never fail the step it watches
                    log.debug(f"progress unavailable: {type(error).__name__}")
                    return

        with source:
            thread = threading.Thread(target=poll, name=f"progress-{label}", daemon=True)
            thread.start()
            try:
                yield meter
            finally:
                stop.set()
                thread.join(timeout=10)
        emit(meter.finish(time.monotonic() - started))
