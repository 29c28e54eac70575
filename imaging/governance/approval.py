"""The approval gate: a release is published only after enough listed approvers signed its exact content.

Layout (`<warehouse>` is the warehouse root):
- `identifiable/held/<cohort>/<release id>/`: a built release waiting for approval. Its content is
  de-identified, but it is not released yet, so it stays outside the de-identified zone.
- `identifiable/approvals/<release id>/<kind>-<signer>.json`: each signed decision (approve or reject)
  of that release id, its signed text and OpenSSH signature, with `<kind>-<signer>.review.txt`, the
  review report the signer saw. Write once: one decision of each kind per approver.
- `identifiable/audit/`: the append-only log of holds, approvals, rejections, publications.
- `deidentified/cohorts/<cohort>/v<version>/`: the published release, with `APPROVAL.json`, the
  signed approvals of its id (unlisted in SHA256SUMS: they are about the content, and name its id).

A decision is a short text (`DecisionText`: the release id, the sha256 of the review report the
signer saw, cohort, version, principal, key fingerprint, time, note) signed in the namespace
`imaging-release` (`imaging.governance.signing`). It counts when its signature verifies, its key is
listed for that principal in the allowed-signers file (`IMAGING_APPROVERS`, default
`platform/approvers`) and it names exactly this release id (`standing_of`). A release is approved by
`approvals_required` (clinical policy, default 2) distinct principals and no rejection.

`decide` is the whole policy, pure: the asset builds the bundle (its id is its content), then asks
what to do with it. `carry_out` is the one way its answers are done: staged in the run's crash-safe
commit (`imaging.driver.commit`), so a run's releases appear together or not at all.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from imaging import fs as fsx
from imaging.catalogue import APPROVALS, AUDIT, COHORTS, HELD, Folder
from imaging.config_files import PLATFORM_DIR, load_as
from imaging.driver.commit import CommitBuilder
from imaging.governance import audit
from imaging.governance.bundle import APPROVAL, SUMS_FILE, content_key_of, verify_bundle
from imaging.governance.cohort import CohortDefinition
from imaging.governance.signing import (AllowedSigners, SignatureError, is_demo_key, load_allowed_signers,
                                        verify_signature)
from imaging.steps.clinical import ClinicalPolicyFile
from imaging.steps.objects import link_tree

HOLD, PUBLISH, UNCHANGED, CONFLICT, BLOCKED, REJECTED = (
    "held", "publish", "unchanged", "conflict", "blocked", "rejected")
EMPTY = "empty"  # a cohort that selects no image: nothing built, nothing released
APPROVE, REJECT = "approve", "reject"
_HEADER = "imaging-release decision v1"


class ApprovalError(ValueError):
    """An approval that cannot be recorded, or a publication it does not allow."""


@dataclass(frozen=True)
class DecisionText:
    """What a signer signs: one line per field, the note as a JSON string (one line whatever it holds)."""

    kind: str  # approve | reject
    release_id: str
    cohort: str
    version: int
    review_sha256: str  # sha256 of the review report the signer saw (`imaging-review PATH` prints it)
    principal: str
    key_fingerprint: str
    signed_at: str  # ISO 8601, UTC
    note: str | None = None  # approve: optional note; reject: the reason

    def render(self) -> bytes:
        lines = [_HEADER, f"decision: {self.kind}", f"release-id: {self.release_id}", f"cohort: {self.cohort}",
                 f"version: {int(self.version)}", f"review-sha256: {self.review_sha256}",
                 f"principal: {self.principal}", f"key: {self.key_fingerprint}", f"signed-at: {self.signed_at}",
                 f"note: {json.dumps(self.note, ensure_ascii=False)}"]
        return ("\n".join(lines) + "\n").encode()

    @classmethod
    def parse(cls, data: bytes) -> "DecisionText":
        lines = data.decode("utf-8").splitlines()
        if not lines or lines[0] != _HEADER:
            raise ApprovalError("not a release decision")
        values = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        try:
            text = cls(values["decision"], values["release-id"], values["cohort"], int(values["version"]),
                       values["review-sha256"], values["principal"], values["key"], values["signed-at"],
                       json.loads(values["note"]))
        except (KeyError, ValueError) as error:
            raise ApprovalError(f"a release decision lacks a field ({error})") from error
        if text.kind not in (APPROVE, REJECT) or text.render() != data:
            raise ApprovalError("not a release decision in its canonical form")
        return text


@dataclass(frozen=True)
class SignedDecision:
    """A decision as stored: the exact signed bytes (text) and the armoured OpenSSH signature."""

    message: str
    signature: str

    def to_dict(self) -> dict:
        return {"message": self.message, "signature": self.signature}

    @classmethod
    def from_dict(cls, raw: Mapping) -> "SignedDecision":
        return cls(str(raw["message"]), str(raw["signature"]))


@dataclass(frozen=True)
class VerifiedDecision:
    """A decision whose signature verified, by a key listed for its principal, naming this release id."""

    text: DecisionText
    demo_key: bool  # signed by a demo key (public seed): counts only for a demo-key release


@dataclass(frozen=True)
class Standing:
    """Where a release id stands: the decisions that count, and what is wrong with the others."""

    release_id: str
    required: int
    approvals: tuple[VerifiedDecision, ...] = ()  # valid, one per principal
    rejections: tuple[VerifiedDecision, ...] = ()
    problems: tuple[str, ...] = ()  # decisions that do not count, and why (no values but principals)
    flags: tuple[str, ...] = ()

    @property
    def rejected(self) -> bool:
        return bool(self.rejections)

    @property
    def approved(self) -> bool:
        return not self.rejected and len(self.approvals) >= self.required

    def summary(self) -> str:
        if self.rejected:
            r = self.rejections[0].text
            return f"rejected by {r.principal} at {r.signed_at}: {r.note}"
        names = ", ".join(f"{a.text.principal} at {a.text.signed_at}" for a in self.approvals)
        return f"{len(self.approvals)} of {self.required} signed approvals" + (f" ({names})" if names else "")


@dataclass(frozen=True)
class ApprovalPolicy:
    """Who may sign (the allowed-signers file) and how many distinct approvers a release needs."""

    required: int
    signers: AllowedSigners

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None) -> "ApprovalPolicy":
        """IMAGING_APPROVERS (default platform/approvers) and the clinical policy's approvals_required."""
        env = os.environ if env is None else env
        path = env.get("IMAGING_APPROVERS", "").strip() or str(PLATFORM_DIR / "approvers")
        try:
            signers = load_allowed_signers(Path(path).expanduser())
        except SignatureError as error:
            raise ApprovalError(f"IMAGING_APPROVERS: {error}") from error
        return cls(load_as(ClinicalPolicyFile, "clinical_policy.yaml").approvals_required, signers)


def standing_of(release_id: str, decisions: Sequence[SignedDecision], policy: ApprovalPolicy,
                demo_release: bool = False) -> Standing:
    """Verify each decision offline and count the ones that hold for exactly `release_id`."""
    approvals: dict[str, VerifiedDecision] = {}
    rejections, problems, flags = [], [], []
    for decision in decisions:
        try:
            text = DecisionText.parse(decision.message.encode())
            sig = verify_signature(decision.message.encode(), decision.signature)
        except (ApprovalError, SignatureError, UnicodeError) as error:
            problems.append(f"a decision does not verify: {error}")
            continue
        signer = policy.signers.principal_of(sig.public_key)
        who = f"{text.kind} by {text.principal}"
        if signer is None:
            problems.append(f"{who}: its key ({sig.fingerprint}) is not in the allowed signers ({policy.signers.source})")
            continue
        if signer.principal != text.principal:
            problems.append(f"{who}: the key is listed for {signer.principal}, not for the principal the text names")
            continue
        if sig.fingerprint != text.key_fingerprint:
            problems.append(f"{who}: signed with another key ({sig.fingerprint}) than the text names")
            continue
        if text.release_id != release_id:
            problems.append(f"{who}: signs another release id ({text.release_id[:16]}...), not this release")
            continue
        demo = is_demo_key(sig.fingerprint)
        if demo:
            flags.append(f"{who}: signed with a DEMO approver key ({sig.fingerprint}): not a real approval")
            if not demo_release:
                problems.append(f"{who}: a demo approver key counts only for a release made under the demo "
                                f"pseudonym key")
                continue
        verified = VerifiedDecision(text, demo)
        if text.kind == REJECT:
            rejections.append(verified)
        elif text.principal not in approvals:
            approvals[text.principal] = verified
    return Standing(release_id, policy.required, tuple(approvals.values()), tuple(rejections), tuple(problems),
                    tuple(flags))


@dataclass(frozen=True)
class HeldRelease:
    path: str
    cohort: str
    version: int
    release_id: str  # recomputed from the held SHA256SUMS, not taken from the folder name
    content_key: str | None  # see imaging.governance.bundle.content_key_of
    standing: Standing | None = None

    @property
    def status(self) -> str:
        if self.standing is None:
            return "awaiting approval"
        if self.standing.rejected:
            return "rejected: never published"
        if self.standing.approved:
            return "approved, publishes at the next materialization"
        return f"awaiting approval ({len(self.standing.approvals)} of {self.standing.required})"


@dataclass(frozen=True)
class ReleaseKey:
    """A release's two names: its id (every byte) and its content key (data, selection, code; no run facts)."""

    release_id: str
    content_key: str | None


@dataclass(frozen=True)
class Decision:
    action: str  # held | publish | unchanged | conflict | blocked | rejected (| empty: nothing was built)
    reason: str
    release_id: str  # the release acted on: the one just built, or a held or published one of the same content
    from_held: bool = False  # act on the held release of that id rather than the one just built


def decide(built: ReleaseKey, *, published: ReleaseKey | None, held: Sequence[HeldRelease] = (),
           standing: Standing | None = None, k_passed: bool, k_reason: str = "") -> Decision:
    """What to do with a freshly built release of a cohort version (the whole rule; pure).

    A published version is immutable: the same content (data, selection, code) is `unchanged`,
    other content a `conflict` (raise the version). Otherwise a release below the minimum k is
    `blocked`. A rejected content is `rejected`: never published, never held again. Approvals name
    exact bytes, so what is published is what was approved: the build itself when its id has its
    signed approvals (`standing`), or the approved held release of the same content (a rebuild after
    an input was re-materialized names other runs, hence other bytes). Anything else is held, once
    per content: an identical-content release already held stays the one to review.
    """
    if published is not None:
        if published.release_id is None:
            return Decision(CONFLICT, "this version was withdrawn or expired (its folder keeps WITHDRAWN.json); "
                                      "raise `version` in the cohort definition to release anew", built.release_id)
        if published.content_key == built.content_key:
            return Decision(UNCHANGED, "already published with this content", published.release_id)
        return Decision(CONFLICT, "this version is published with other content; releases are immutable: "
                                  "raise `version` in the cohort definition to publish anew", built.release_id)
    if not k_passed:
        return Decision(BLOCKED, f"below the minimum k: {k_reason}" if k_reason else "below the minimum k",
                        built.release_id)
    if standing is not None and standing.release_id == built.release_id:
        if standing.rejected:
            return Decision(REJECTED, standing.summary(), built.release_id)
        if standing.approved:
            return Decision(PUBLISH, standing.summary(), built.release_id)
    same = [h for h in held if h.content_key is not None and h.content_key == built.content_key]
    for h in same:
        if h.standing is not None and h.standing.release_id == h.release_id and h.standing.rejected:
            return Decision(REJECTED, h.standing.summary(), h.release_id, from_held=True)
    for h in same:
        if h.standing is not None and h.standing.release_id == h.release_id and h.standing.approved:
            return Decision(PUBLISH, h.standing.summary(), h.release_id, from_held=True)
    if same:
        return Decision(HOLD, "this content is already held for review (imaging-review pending)",
                        same[0].release_id, from_held=True)
    return Decision(HOLD, "no signed approvals of this exact content yet: held for review (imaging-review pending)",
                    built.release_id)


# Cohort names come from configuration and release ids from checksums; `fsx.under` refuses any that could
# name a folder outside the warehouse all the same.
def held_path(warehouse: str, cohort: str, rid: str) -> str:
    return fsx.under(warehouse, f"{HELD.path}/{cohort}/{rid}")


def published_path(warehouse: str, cohort: str, version: int) -> str:
    return fsx.under(warehouse, f"{COHORTS.path}/{cohort}/v{int(version)}")


def decisions_path(warehouse: str, rid: str) -> str:
    """The folder of a release id's signed decisions in the identifiable zone."""
    if len(rid) != 64 or any(c not in "0123456789abcdef" for c in rid):
        raise ApprovalError("a release id is 64 lower-case hex digits")
    return fsx.under(warehouse, f"{APPROVALS.path}/{rid}")


def manifest_id(root: str) -> str | None:
    """The release id of a bundle (sha256 of its SHA256SUMS), or None when it has none."""
    return fsx.sha256_url(f"{root}/{SUMS_FILE}") if fsx.exists(f"{root}/{SUMS_FILE}") else None


def _read(url: str) -> bytes:
    with fsx.open_read(url) as handle:
        return handle.read()


def _signer_token(principal: str) -> str:
    """A principal as a file name: a hash, so no name reaches a path."""
    return hashlib.sha256(principal.encode()).hexdigest()[:16]


def load_decisions(warehouse: str, rid: str) -> list[SignedDecision]:
    """Every signed decision the store holds for a release id (approve and reject), in name order."""
    folder = decisions_path(warehouse, rid)
    fs, path = fsx.filesystem(folder)
    if not fs.exists(path):
        return []
    names = sorted(p for p in fs.ls(path, detail=False) if p.endswith(".json"))
    return [SignedDecision.from_dict(json.loads(_read(fsx.qualify(fs, p)))) for p in names]


def load_standing(warehouse: str, rid: str, policy: ApprovalPolicy, demo_release: bool = False) -> Standing:
    return standing_of(rid, load_decisions(warehouse, rid), policy, demo_release)


def store_decision(warehouse: str, text: DecisionText, signature: str, report: str) -> str:
    """Write a signed decision and the report its signer saw, once: a principal decides a kind once."""
    folder = decisions_path(warehouse, text.release_id)
    name = f"{text.kind}-{_signer_token(text.principal)}"
    url = f"{folder}/{name}.json"
    if fsx.exists(url):
        raise ApprovalError(f"{text.principal} has already recorded a decision '{text.kind}' on this release: "
                            f"a second one is refused")
    fsx.write_bytes(f"{folder}/{name}.review.txt", report.encode())
    record = SignedDecision(text.render().decode(), signature)
    fsx.write_bytes(url, json.dumps(record.to_dict(), indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return url


def stored_report(warehouse: str, text: DecisionText) -> str | None:
    """The review report a signer saw when they signed `text` (identifiable zone), if kept."""
    url = f"{decisions_path(warehouse, text.release_id)}/{text.kind}-{_signer_token(text.principal)}.review.txt"
    return _read(url).decode() if fsx.exists(url) else None


def read_release_json(root: str) -> dict:
    return json.loads(_read(f"{root}/release.json"))


def is_demo_release(root: str) -> bool:
    """Whether a release's data card says it was made under the demo pseudonym key."""
    url = f"{root}/datacard.json"
    if not fsx.exists(url):
        return False
    return bool(json.loads(_read(url)).get("pseudonym_key", {}).get("demo_key"))


def warehouse_of_held(path: str) -> str:
    """The warehouse root of a held release folder (<warehouse>/identifiable/held/<cohort>/<id>)."""
    parts = path.rstrip("/").split("/")
    if len(parts) < 5 or parts[-4:-2] != HELD.path.split("/"):
        raise ApprovalError("only a held release (<warehouse>/identifiable/held/<cohort>/<release id>) can be "
                            "approved or rejected")
    return "/".join(parts[:-4])


def list_held(warehouse: str, cohort: str | None = None, version: int | None = None,
              policy: ApprovalPolicy | None = None) -> list[HeldRelease]:
    """Held releases not published yet, by cohort name (optionally of one cohort version), each with
    where its signed decisions leave it (`policy`: who may sign; by default IMAGING_APPROVERS)."""
    fs, root = fsx.filesystem(f"{warehouse}/{HELD.path}")
    out = []
    policy = policy or ApprovalPolicy.load()
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
        out.append(HeldRelease(folder, name, number, rid, content_key_of(folder),
                               load_standing(warehouse, rid, policy, is_demo_release(folder))))
    return out


def approval_copy(root: str) -> list[SignedDecision] | None:
    """The signed approvals a published release carries (APPROVAL.json), or None without one."""
    url = f"{root}/{APPROVAL}"
    if not fsx.exists(url):
        return None
    raw = json.loads(_read(url))
    return [SignedDecision.from_dict(d) for d in raw.get("approvals", [])]


def approval_copy_bytes(rid: str, decisions: Sequence[SignedDecision]) -> bytes:
    body = {"release_id": rid, "approvals": [d.to_dict() for d in decisions],
            "verify": "imaging-review PATH, or per approval: ssh-keygen -Y verify -f <allowed signers> "
                      "-I <principal> -n imaging-release -s <signature file> < <message file>"}
    return json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"


@dataclass(frozen=True)
class ReleasePlan:
    """One cohort version in a run: its definition, what `decide` said, its staged build, its image count."""

    cohort: CohortDefinition
    decision: Decision
    building: str  # the build staged in the run's commit (`building_url`); "" when nothing was built
    images: int
    # Each image's identity as the build's copy placed it (path -> identity): publication verifies the bundle
    # without hashing again a file whose identity is unchanged (imaging.governance.bundle.verify_bundle).
    trusted: Mapping[str, str] | None = None


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


def carry_out(plans: Sequence[ReleasePlan], commit: CommitBuilder, warehouse: str,
              policy: ApprovalPolicy | None = None, run_id: str | None = None) -> dict[str, Outcome]:
    """Carry out `decide`'s answers for a run's cohorts through its commit, then apply it (the one way).

    `commit` must stage the warehouse's zones (`<warehouse>/identifiable`, `<warehouse>/deidentified`).
    Any conflict refuses the whole run before anything is staged: releases go out together or not at
    all. held: the build is swapped in at held/<cohort>/<id>/ (when that content is held already, the
    build is left to the staging). publish: the approved bundle (the build, or a copy of the held one)
    is swapped in at cohorts/<cohort>/v<version>/ with its signed approvals (verified again against
    `policy`, by default IMAGING_APPROVERS), and the same commit removes the held copy. unchanged,
    blocked, rejected, empty: the build is left to the staging, which the commit removes; a published
    release is never touched. New holds and publications are appended to the audit log in the same
    commit. Returns each cohort's outcome, by name.
    """
    conflicts = sorted(p.cohort.name for p in plans if p.decision.action == CONFLICT)
    if conflicts:
        raise ApprovalError(f"cohort releases already published with other content: {', '.join(conflicts)}; "
                            f"releases are immutable: raise `version` in their definitions to publish anew")
    if any(p.decision.action == PUBLISH for p in plans):
        policy = policy or ApprovalPolicy.load()
    outcomes = {}
    for plan in plans:
        cohort, decision = plan.cohort, plan.decision
        name, rid, path = cohort.name, decision.release_id, None
        if decision.action == HOLD and not decision.from_held:
            fsx.move(plan.building, _staged(commit, warehouse, HELD, name, rid))
            _swap(commit, warehouse, HELD, f"{name}/{rid}")
        if decision.action == PUBLISH:
            _stage_publication(commit, warehouse, plan, policy)
        if decision.action == HOLD:
            path = f"{warehouse}/{HELD.path}/{name}/{rid}"
        if decision.action == PUBLISH:
            path = f"{warehouse}/{COHORTS.path}/{name}/{cohort.release}"
        outcomes[name] = Outcome(decision.action, decision.reason, rid, path)
    # Each new hold and publication is logged in the same commit: both appear, or neither.
    run = f" (run {run_id})" if run_id else ""
    events = [audit.PendingEvent(audit.PUBLISH if p.decision.action == PUBLISH else audit.HOLD, p.decision.release_id,
                                 p.cohort.name, p.cohort.version, detail=f"{p.decision.reason}{run}")
              for p in plans if p.decision.action == PUBLISH or (p.decision.action == HOLD and not p.decision.from_held)]
    for event in audit.prepare(warehouse, events):
        fsx.write_bytes(_staged(commit, warehouse, AUDIT, event.name), event.data)
        _swap(commit, warehouse, AUDIT, event.name)
    commit.build().apply()
    for plan in plans:
        if plan.decision.action == PUBLISH:  # the held copy went with the commit; drop its cohort's folder if empty
            fsx.remove_empty(f"{warehouse}/{HELD.path}/{plan.cohort.name}")
    return outcomes


def _stage_publication(commit: CommitBuilder, warehouse: str, plan: ReleasePlan, policy: ApprovalPolicy) -> None:
    """Stage the approved bundle at cohorts/<name>/v<version> with its signed approvals; drop the held copy."""
    cohort, rid = plan.cohort, plan.decision.release_id
    if fsx.exists(f"{warehouse}/{COHORTS.path}/{cohort.name}/{cohort.release}"):
        raise ApprovalError("the target version exists: releases are immutable")
    staged = _staged(commit, warehouse, COHORTS, cohort.name, cohort.release)
    if plan.decision.from_held:  # copied, not moved: the held copy leaves only when the commit succeeds; its
        # images are hard links (server-side copies on an object store), never written again
        link_tree(f"{warehouse}/{HELD.path}/{cohort.name}/{rid}", staged)
    else:
        fsx.move(plan.building, staged)
    decisions = load_decisions(warehouse, rid)
    standing = standing_of(rid, decisions, policy, is_demo_release(staged))
    counted = {(a.text.principal, a.text.signed_at) for a in standing.approvals}
    approvals = [d for d in decisions if _counted(d, counted)]
    fsx.write_bytes(f"{staged}/{APPROVAL}", approval_copy_bytes(rid, approvals))
    check = verify_bundle(staged, trusted=plan.trusted)
    wrong = [a for a in standing.approvals if (a.text.cohort, a.text.version) != (cohort.name, cohort.version)]
    if not standing.approved or wrong or not check.ok or check.release_id != rid:
        raise ApprovalError(f"cohort {cohort.name}: the bundle to publish does not verify as the approved content "
                            f"({standing.summary()})")
    _swap(commit, warehouse, COHORTS, f"{cohort.name}/{cohort.release}")
    _swap(commit, warehouse, HELD, f"{cohort.name}/{rid}")  # nothing staged there: removes the held copy


def _counted(decision: SignedDecision, counted: set) -> bool:
    try:
        text = DecisionText.parse(decision.message.encode())
    except (ApprovalError, UnicodeError):
        return False
    return text.kind == APPROVE and (text.principal, text.signed_at) in counted
