"""The approval gate: a release is published only after someone approved its exact content.

Layout (`<warehouse>` is the warehouse root):
- `identifiable/held/<cohort>/<release id>/`: a built release waiting for approval. Its content is
  de-identified, but it is not released yet, so it stays outside the de-identified zone.
- `identifiable/approvals/<release id>.json`: who approved which content, when, with what note. Write
  once: the approval of a release id is never replaced.
- `deidentified/cohorts/<cohort>/v<version>/`: the published release, with `APPROVAL.json`, a copy
  of its approval (unlisted in SHA256SUMS: it is about the content, and names the id it approves).

`decide` is the whole policy, pure: the asset builds the bundle (its id is its content), then asks
what to do with it. `carry_out` is the one way its answers are done: staged in the run's crash-safe
commit (`imaging.driver.commit`), so a run's releases appear together or not at all. The rest reads and
writes the small JSON records.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass
from typing import Sequence

from imaging import fs as fsx
from imaging.catalogue import APPROVALS, COHORTS, HELD, Folder
from imaging.driver.commit import CommitBuilder
from imaging.governance.bundle import APPROVAL, SUMS_FILE, content_key_of, verify_bundle
from imaging.governance.cohort import CohortDefinition

HOLD, PUBLISH, UNCHANGED, CONFLICT, BLOCKED = "held", "publish", "unchanged", "conflict", "blocked"
EMPTY = "empty"  # a cohort that selects no image: nothing built, nothing released


class ApprovalError(ValueError):
    """An approval that cannot be recorded, or a publication it does not allow."""


@dataclass(frozen=True)
class Approval:
    release_id: str
    cohort: str
    version: int
    approved_by: str
    approved_at: str  # ISO 8601, UTC
    note: str | None = None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"

    @classmethod
    def from_json(cls, data: bytes) -> "Approval":
        raw = json.loads(data)
        return cls(str(raw["release_id"]), str(raw["cohort"]), int(raw["version"]), str(raw["approved_by"]),
                   str(raw["approved_at"]), raw.get("note"))


@dataclass(frozen=True)
class HeldRelease:
    path: str
    cohort: str
    version: int
    release_id: str  # recomputed from the held SHA256SUMS, not taken from the folder name
    content_key: str | None  # see imaging.governance.bundle.content_key_of
    approval: Approval | None

    @property
    def status(self) -> str:
        return "approved, publishes at the next materialization" if self.approval else "awaiting approval"


@dataclass(frozen=True)
class ReleaseKey:
    """A release's two names: its id (every byte) and its content key (data, selection, code; no run facts)."""

    release_id: str
    content_key: str | None


@dataclass(frozen=True)
class Decision:
    action: str  # held | publish | unchanged | conflict | blocked (| empty: nothing was built)
    reason: str
    release_id: str  # the release acted on: the one just built, or a held or published one of the same content
    from_held: bool = False  # act on the held release of that id rather than the one just built


def decide(built: ReleaseKey, *, published: ReleaseKey | None, held: Sequence[HeldRelease] = (),
           approval: Approval | None = None, k_passed: bool, k_reason: str = "") -> Decision:
    """What to do with a freshly built release of a cohort version (the whole rule; pure).

    A published version is immutable: the same content (data, selection, code) is `unchanged`,
    other content a `conflict` (raise the version). Otherwise a release below the minimum k is
    `blocked`. An approval names exact bytes, so what is published is what was approved: the
    build itself when its id was approved, or the approved held release of the same content (a
    rebuild after an input was re-materialized names other runs, hence other bytes). Anything
    else is held, once per content: an identical-content release already held stays the one to
    review.
    """
    if published is not None:
        if published.content_key == built.content_key:
            return Decision(UNCHANGED, "already published with this content", published.release_id)
        return Decision(CONFLICT, "this version is published with other content; releases are immutable: "
                                  "raise `version` in the cohort definition to publish anew", built.release_id)
    if not k_passed:
        return Decision(BLOCKED, f"below the minimum k: {k_reason}" if k_reason else "below the minimum k",
                        built.release_id)
    if approval is not None and approval.release_id == built.release_id:
        return Decision(PUBLISH, f"approved by {approval.approved_by} at {approval.approved_at}", built.release_id)
    same = [h for h in held if h.content_key is not None and h.content_key == built.content_key]
    for h in same:
        if h.approval is not None and h.approval.release_id == h.release_id:
            return Decision(PUBLISH, f"approved by {h.approval.approved_by} at {h.approval.approved_at}",
                            h.release_id, from_held=True)
    if same:
        return Decision(HOLD, "this content is already held for review (imaging-review pending)",
                        same[0].release_id, from_held=True)
    return Decision(HOLD, "no approval of this exact content yet: held for review (imaging-review pending)",
                    built.release_id)


# Cohort names come from configuration and release ids from checksums; `fsx.under` refuses any that could
# name a folder outside the warehouse all the same.
def held_path(warehouse: str, cohort: str, rid: str) -> str:
    return fsx.under(warehouse, f"{HELD.path}/{cohort}/{rid}")


def published_path(warehouse: str, cohort: str, version: int) -> str:
    return fsx.under(warehouse, f"{COHORTS.path}/{cohort}/v{int(version)}")


def approval_path(warehouse: str, rid: str) -> str:
    return fsx.under(warehouse, f"{APPROVALS.path}/{rid}.json")


def manifest_id(root: str) -> str | None:
    """The release id of a bundle (sha256 of its SHA256SUMS), or None when it has none."""
    return fsx.sha256_url(f"{root}/{SUMS_FILE}") if fsx.exists(f"{root}/{SUMS_FILE}") else None


def _read(url: str) -> bytes:
    fs, path = fsx.filesystem(url)
    with fs.open(path, "rb") as handle:
        return handle.read()


def load_approval(warehouse: str, rid: str) -> Approval | None:
    url = approval_path(warehouse, rid)
    return Approval.from_json(_read(url)) if fsx.exists(url) else None


def read_release_json(root: str) -> dict:
    return json.loads(_read(f"{root}/release.json"))


def warehouse_of_held(path: str) -> str:
    """The warehouse root of a held release folder (<warehouse>/identifiable/held/<cohort>/<id>)."""
    parts = path.rstrip("/").split("/")
    if len(parts) < 5 or parts[-4:-2] != HELD.path.split("/"):
        raise ApprovalError("only a held release (<warehouse>/identifiable/held/<cohort>/<release id>) can be approved")
    return "/".join(parts[:-4])


def record_approval(path: str, approved_by: str, note: str | None = None, now: dt.datetime | None = None) -> Approval:
    """Record an approval of the held release at `path`, after verifying every file of it.

    Write once: approving an already approved release id returns the existing record unchanged.
    """
    approved_by = (approved_by or "").strip()
    if not approved_by or len(approved_by) > 100 or "\n" in approved_by:
        raise ApprovalError("--by needs the approver's name (one line, at most 100 characters)")
    if note is not None and len(note) > 2000:
        raise ApprovalError("a note is at most 2000 characters")
    warehouse = warehouse_of_held(path)
    check = verify_bundle(path)
    if not check.ok:
        raise ApprovalError(f"the held release does not verify ({len(check.problems)} problems): nothing approved")
    if path.rstrip("/").rsplit("/", 1)[-1] != check.release_id:
        raise ApprovalError("the held folder's name is not its release id: nothing approved")
    existing = load_approval(warehouse, check.release_id)
    if existing is not None:
        return existing
    info = read_release_json(path)
    approval = Approval(check.release_id, str(info["cohort"]), int(str(info["release"]).lstrip("v")), approved_by,
                        (now or dt.datetime.now(dt.timezone.utc)).replace(microsecond=0).isoformat(), note or None)
    fsx.write_bytes(approval_path(warehouse, check.release_id), approval.to_json())
    return approval


def list_held(warehouse: str, cohort: str | None = None, version: int | None = None) -> list[HeldRelease]:
    """Held releases not published yet, by cohort name (optionally of one cohort version)."""
    fs, root = fsx.filesystem(f"{warehouse}/{HELD.path}")
    out = []
    # <cohort>/<release id>/SHA256SUMS: a glob two levels deep, not a listing of every held image.
    for manifest in sorted(fs.glob(f"{root}/*/*/{SUMS_FILE}")):
        folder = fsx.qualify(fs, manifest.rsplit("/", 1)[0])
        path = folder[len(fsx.qualify(fs, root)) + 1:]
        rid = manifest_id(folder)
        info = read_release_json(folder) if fsx.exists(f"{folder}/release.json") else {}
        name, number = str(info.get("cohort", path.split("/")[0])), int(str(info.get("release", "v0")).lstrip("v"))
        if (cohort is not None and name != cohort) or (version is not None and number != version):
            continue
        if manifest_id(published_path(warehouse, name, number)) == rid:
            continue
        out.append(HeldRelease(folder, name, number, rid, content_key_of(folder), load_approval(warehouse, rid)))
    return out


def approval_copy(root: str) -> Approval | None:
    """The approval a published release carries, if any."""
    url = f"{root}/{APPROVAL}"
    return Approval.from_json(_read(url)) if fsx.exists(url) else None


@dataclass(frozen=True)
class ReleasePlan:
    """One cohort version in a run: its definition, what `decide` said, its staged build, its image count."""

    cohort: CohortDefinition
    decision: Decision
    building: str  # the build staged in the run's commit (`building_url`); "" when nothing was built
    images: int


@dataclass(frozen=True)
class Outcome:
    """What happened to one cohort version in a run: counts and paths only, for the run's metadata."""

    action: str
    reason: str
    release_id: str
    path: str | None  # where the release now is, held or published; None for any other action


def _staged(commit: CommitBuilder, warehouse: str, folder: Folder, *parts: str) -> str:
    return "/".join([commit.staging(f"{warehouse}/{folder.zone}"), folder.name, *parts])


def _swap(commit: CommitBuilder, warehouse: str, folder: Folder, sub: str) -> None:
    commit.replace(f"{warehouse}/{folder.zone}", f"{folder.name}/{sub}")


def building_url(commit: CommitBuilder, warehouse: str, cohort: str) -> str:
    """Where a run builds a cohort's release: staged in its commit, so whatever is not kept goes with it."""
    return _staged(commit, warehouse, HELD, cohort, "_building")


def carry_out(plans: Sequence[ReleasePlan], commit: CommitBuilder, warehouse: str) -> dict[str, Outcome]:
    """Carry out `decide`'s answers for a run's cohorts through its commit, then apply it (the one way).

    `commit` must stage the warehouse's zones (`<warehouse>/identifiable`, `<warehouse>/deidentified`).
    Any conflict refuses the whole run before anything is staged: releases go out together or not at
    all. held: the build is swapped in at held/<cohort>/<id>/ (when that content is held already, the
    build is left to the staging). publish: the approved bundle (the build, or a copy of the held one)
    is swapped in at cohorts/<cohort>/v<version>/ with its approval copy, and the same commit removes
    the held copy. unchanged, blocked, empty: the build is left to the staging, which the commit
    removes; a published release is never touched. Returns each cohort's outcome, by name.
    """
    conflicts = sorted(p.cohort.name for p in plans if p.decision.action == CONFLICT)
    if conflicts:
        raise ApprovalError(f"cohort releases already published with other content: {', '.join(conflicts)}; "
                            f"releases are immutable: raise `version` in their definitions to publish anew")
    outcomes = {}
    for plan in plans:
        cohort, decision = plan.cohort, plan.decision
        name, rid, path = cohort.name, decision.release_id, None
        if decision.action == HOLD and not decision.from_held:
            fsx.move(plan.building, _staged(commit, warehouse, HELD, name, rid))
            _swap(commit, warehouse, HELD, f"{name}/{rid}")
        if decision.action == PUBLISH:
            _stage_publication(commit, warehouse, plan)
        if decision.action == HOLD:
            path = f"{warehouse}/{HELD.path}/{name}/{rid}"
        if decision.action == PUBLISH:
            path = f"{warehouse}/{COHORTS.path}/{name}/{cohort.release}"
        outcomes[name] = Outcome(decision.action, decision.reason, rid, path)
    commit.build().apply()
    for plan in plans:
        if plan.decision.action == PUBLISH:  # the held copy went with the commit; drop its cohort's folder if empty
            fsx.remove_empty(f"{warehouse}/{HELD.path}/{plan.cohort.name}")
    return outcomes


def _stage_publication(commit: CommitBuilder, warehouse: str, plan: ReleasePlan) -> None:
    """Stage the approved bundle at cohorts/<name>/v<version> with its approval copy; drop the held copy."""
    cohort, rid = plan.cohort, plan.decision.release_id
    if fsx.exists(f"{warehouse}/{COHORTS.path}/{cohort.name}/{cohort.release}"):
        raise ApprovalError("the target version exists: releases are immutable")
    approval = load_approval(warehouse, rid)
    staged = _staged(commit, warehouse, COHORTS, cohort.name, cohort.release)
    if plan.decision.from_held:  # copied, not moved: the held copy leaves only when the commit succeeds
        fs, source = fsx.filesystem(f"{warehouse}/{HELD.path}/{cohort.name}/{rid}")
        _, target = fsx.filesystem(staged)
        fs.makedirs(fs._parent(target), exist_ok=True)
        fs.copy(source, target, recursive=True)
    else:
        fsx.move(plan.building, staged)
    if approval is not None:
        fsx.write_bytes(f"{staged}/{APPROVAL}", approval.to_json())
    check = verify_bundle(staged)
    if (approval is None or not check.ok or check.release_id != rid
            or (approval.cohort, approval.version) != (cohort.name, cohort.version)):
        raise ApprovalError(f"cohort {cohort.name}: the bundle to publish does not verify as the approved content")
    _swap(commit, warehouse, COHORTS, f"{cohort.name}/{cohort.release}")
    _swap(commit, warehouse, HELD, f"{cohort.name}/{rid}")  # nothing staged there: removes the held copy
