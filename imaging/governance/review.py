"""`imaging-review`: what a governance reviewer runs, offline, on a release or one published file.

    imaging-review PATH [--html OUT]                          review a release folder or one file of one
    imaging-review pending                                    held releases: path, cohort, version, id, status
    imaging-review approve PATH --key PRIVATE_KEY [--note T]  sign an approval of a held release
    imaging-review reject PATH --key PRIVATE_KEY --reason T   sign a rejection: the release is never published
    imaging-review diff OLD NEW                               two versions of a cohort: rows, patients, columns,
                                                              options, code versions

Reviewing verifies the checksums (the whole release, or for one file that file and the release's
description files), recomputes the data digest, cross-checks metadata.csv, metadata.parquet and each
image's sha256, recomputes k-anonymity from the metadata and the released DICOM headers together, and
verifies the signed approvals offline against the allowed-signers file (`IMAGING_APPROVERS`, default
`platform/approvers`). With `IMAGING_WAREHOUSE` set (or on a held release, whose warehouse its path
names) it also reads the identifiable zone: the approval store, the audit log, the provenance ledger
(every image back to its landing file, checksum, run and partition), the per-attribute evidence and
the quarantine of the partitions read.

The verdict: FAILED (a problem), REJECTED (a signed rejection), AWAITING APPROVAL (fewer valid signed
approvals than `approvals_required`) or VERIFIED. Exit status 0 only when VERIFIED, 1 otherwise, 2 on a
usage error. The report's evidence (everything but the decisions) has a sha256, printed last: that is
what an approval signs.

No identifier by default: the provenance names each landing file by its keyed token (imaging/quarantine.py) and
its sha256, never its path (hospital exports name folders after patients), so what a reviewer copies from the
console carries no identifier. `--identifiable` (operators in the identifiable zone) also prints the landing
paths, after the report and outside what an approval signs, and says so at the top. The HTML report carries
checksums, tokens, runs and versions, never a landing path, a real date or a site.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field

from imaging import fs as fsx
from imaging.catalogue import COHORTS, HELD, LEDGER, WITHDRAWN
from imaging.config_model import ConfigError
from imaging.deid.quiet import quiet
from imaging.driver.config import read_yaml
from imaging.governance import audit
from imaging.governance.approval import (APPROVE, REJECT, ApprovalError, ApprovalPolicy, DecisionText, SignedDecision,
                                         Standing, approval_copy, list_held, load_decisions, standing_of,
                                         store_decision, stored_report, warehouse_of_held)
from imaging.governance.bundle import BundleCheck, find_bundle_root, read_manifest, verify_bundle
from imaging.governance.datacard import NOT_EVALUATED, NOT_OBSERVED
from imaging.governance.disclosure import DisclosurePolicy
from imaging.governance.evidence import (AttributeCount, EvidenceCache, ExactCounts, KFromFiles, QuarantineCount,
                                         arrived_columns, attribute_evidence, cross_check, exact_counts, k_from_files,
                                         quarantine_summary, read_metadata, release_summary, stamp_of)
from imaging.governance.optout import SINCE, Recheck, recheck, released_persons, sites_of_tokens
from imaging.governance.signing import SignatureError, fingerprint, public_key_of, sign, verify_signature
from imaging.provenance import ProvenanceRecord

FAILED, REJECTED, AWAITING, VERIFIED = "FAILED", "REJECTED", "AWAITING APPROVAL", "VERIFIED"
NO_TOKEN = "(no token key in the identifiable zone yet)"
IDENTIFIABLE_VIEW = ("IDENTIFIABLE VIEW (--identifiable): this output holds landing paths of the identifiable zone, "
                     "which may name patients. Keep it there: quote tokens elsewhere.")


@dataclass(frozen=True)
class Trace:
    """One released image walked back through the provenance ledger."""

    file: str  # path inside the release
    sha256: str
    record: ProvenanceRecord | None
    landing: str  # "verified" | "absent" | "differs" | "not traced"
    token: str | None = None  # the landing file's keyed token (imaging/quarantine.py); None: no token key recorded
    withdrawn: bool = False  # its ledger row is in withdrawn_images: withdrawn from the de-identified zone since


@dataclass
class Review:
    root: str
    file: str | None
    state: str  # published | held | unplaced
    check: BundleCheck
    card: dict | None = None
    row: dict | None = None  # the metadata row of the reviewed file
    warehouse: str | None = None
    tables: str | None = None  # root of the identifiable tables (IMAGING_TABLES when apart), with the warehouse
    standing: Standing | None = None  # the signed decisions that count, and why others do not
    decisions_from: str = ""  # where they were read
    counts: ExactCounts | None = None  # exact, from metadata.parquet
    k: KFromFiles | None = None  # recomputed from the released files
    policy_min_k: int | None = None
    attributes: list[AttributeCount] = field(default_factory=list)
    quarantine: list[QuarantineCount] | None = None  # None: not read (no identifiable zone)
    arrived: set[str] | None = None  # clinical columns that arrived in the partitions read (None: not read)
    audit_events: list = field(default_factory=list)
    traces: list[Trace] = field(default_factory=list)
    optouts: Recheck | None = None  # released patients against the opt-out lists (identifiable zone); None: not read
    text: object | None = None  # imaging.governance.contact_sheet.TextEvidence: burned-in text per type, thumbnails
    problems: list[str] = field(default_factory=list)  # evidence problems (the decisions' are in `standing`)
    flags: list[str] = field(default_factory=list)  # shown first, not failing: a demo key, a k below policy
    notes: list[str] = field(default_factory=list)

    @property
    def all_problems(self) -> list[str]:
        return self.problems + list(self.standing.problems if self.standing else ())

    @property
    def ok(self) -> bool:
        """No problem with the evidence or the decisions (approvals may still be missing)."""
        return not self.all_problems

    @property
    def verdict(self) -> str:
        if not self.ok:
            return FAILED
        if self.standing is not None and self.standing.rejected:
            return REJECTED
        if self.standing is None or not self.standing.approved:
            return AWAITING
        return VERIFIED

    @property
    def settled(self) -> bool | None:
        """True when VERIFIED, None while AWAITING approval, False when FAILED or REJECTED (how a report
        colours the verdict)."""
        return {VERIFIED: True, AWAITING: None}.get(self.verdict, False)

    @property
    def sha256(self) -> str:
        """The review report's sha256 (`report_sha256`): what an approval signs."""
        return report_sha256(self)

    @property
    def release_id(self) -> str | None:
        return self.check.release_id

    @property
    def all_flags(self) -> list[str]:
        return self.flags + list(self.standing.flags if self.standing else ())


def _state(root: str) -> str:
    if f"/{COHORTS.path}/" in root + "/":
        return "published"
    if f"/{HELD.path}/" in root + "/":
        return "held"
    return "unplaced"


def _read_json(url: str) -> dict | None:
    if not fsx.exists(url):
        return None
    return json.loads(fsx.read_bytes(url))


def _landing_state(record: ProvenanceRecord, cache: EvidenceCache | None = None) -> str:
    try:
        if not fsx.exists(record.source_path):
            return "absent"
        hashed = lambda: fsx.sha256_url(record.source_path)  # noqa: E731
        sha = hashed() if cache is None else cache.landing_sha256(record.source_path, hashed)
        return "verified" if sha == record.source_sha256 else "differs"
    except OSError:
        return "absent"


def _scope(check: dict) -> str:
    """Where a card's check result applies: its partitions (a count), the whole table, or the release."""
    if check.get("partitions"):
        return f"[{len(check['partitions'])} partitions]"
    return {"whole table": "[whole table]", "release": "[this release]"}.get(check.get("scope", "release"), "")


@dataclass(frozen=True)
class CardFindings:
    """What a data card's checks mean for a review: problems fail it, notes are shown."""

    problems: list[str]
    notes: list[str]


def card_check_findings(card: dict) -> CardFindings:
    """What the card's checks mean for a review: problems and notes.

    A failed ERROR check is a problem (it should have blocked publication); a failed WARN check and
    a check with no evaluation on some input partitions are shown as notes. Input partitions whose
    landing site-day was never observed are a note too.
    """
    checks = card.get("checks", [])
    label = lambda c: f"{c['asset']}:{c['check']}" + (  # noqa: E731
        f" ({len(c['partitions'])} partitions)" if c.get("partitions") else "")
    problems, notes = [], []
    failed = [label(c) for c in checks if c["result"] == "failed" and c.get("severity", "ERROR") == "ERROR"]
    if failed:
        problems.append(f"failed ERROR checks recorded in the data card: {', '.join(failed)}")
    warned = [label(c) for c in checks if c["result"] == "failed" and c.get("severity") == "WARN"]
    if warned:
        notes.append(f"failed WARN checks recorded in the data card (shown, not blocking): {', '.join(warned)}")
    unknown = sorted({f"{c['asset']}:{c['check']}" for c in checks if c["result"] == NOT_EVALUATED})
    if unknown:
        notes.append(f"{len(unknown)} checks have no recorded evaluation on some input partitions "
                     f"(the data card says \"{NOT_EVALUATED}\")")
    unobserved = sum(1 for p in card.get("inputs", []) if p.get("landing_data_version") in (None, NOT_OBSERVED))
    if unobserved:
        notes.append(f"{unobserved} input partitions have no observed landing data version")
    return CardFindings(problems=problems, notes=notes)


def _policy_disclosure() -> DisclosurePolicy:
    return DisclosurePolicy.from_dict(read_yaml("clinical_policy.yaml"))


def _lookup_by_name(warehouse: str, batches: list[str], names: set[str]
                    ) -> dict[str, list[tuple[ProvenanceRecord, bool]]]:
    """Ledger rows of the release's batches whose output file is named by one of `names` (instance UID.dcm).

    A released file's bytes differ from the de-identified output's once its quasi-identifier attributes
    are generalised, so the release finds its ledger rows by the new SOP Instance UID its path ends with.
    """
    import pyarrow.compute as pc

    found: dict[str, list[tuple[ProvenanceRecord, bool]]] = {}
    from dataclasses import fields as record_fields

    # The ledger, and the rows of images withdrawn since (their patient opted out): released copies stay traced.
    roots = [r for r in (f"{warehouse}/{LEDGER.path}", f"{warehouse}/{WITHDRAWN.path}") if fsx.exists(r)]
    if not names or not roots:
        return {}
    rows = []
    for root in roots:
        dataset = fsx.parquet_table(root)
        if dataset is None:  # a ledger folder without a file has no row to find
            continue
        table = dataset.to_table(filter=pc.field("batch").isin(batches)) if batches else dataset.to_table()
        rows += [(row, root.endswith(WITHDRAWN.path)) for row in table.to_pylist()]
    for row, withdrawn in rows:
        name = str(row["output_path"]).rsplit("/", 1)[-1]
        if name in names:
            record = ProvenanceRecord(**{f.name: None if row.get(f.name) is None else str(row[f.name])
                                         for f in record_fields(ProvenanceRecord)})
            found.setdefault(name, []).append((record, withdrawn))
    return found


def _decisions(r: Review, carried: list[SignedDecision] | None) -> list[SignedDecision]:
    """The decisions to verify: the copy a published release carries, and the store's when it is readable."""
    decisions, sources = list(carried or []), ["APPROVAL.json"] if carried is not None else []
    if r.warehouse and r.release_id:
        stored = load_decisions(r.warehouse, r.release_id)
        sources.append("the approval store")
        seen = {d.message for d in decisions}
        decisions += [d for d in stored if d.message not in seen]
    r.decisions_from = " and ".join(sources) or "nowhere (no APPROVAL.json, identifiable zone not read)"
    return decisions


def review(path: str, warehouse: str | None = None, policy: ApprovalPolicy | None = None,
           trusted: dict[str, str] | None = None, cache: EvidenceCache | None = None) -> Review:
    """Verify a release folder or one published file, recompute its evidence and verify its decisions.

    published_cohort's own review of what its run just placed passes `trusted` (files not hashed again while
    their identity is the one the copy recorded: imaging.governance.bundle.verify_bundle) and `cache` (what its
    previous review computed from files unchanged since: imaging.governance.evidence.EvidenceCache); the same
    findings, without reading again what did not change. imaging-review passes neither: it reads every byte."""
    location = find_bundle_root(path)
    root, inner = location.root, location.inner
    state = _state(root)
    if warehouse is None and state == "held":  # a held release lies in the identifiable zone it names
        warehouse = warehouse_of_held(root)
    check = verify_bundle(root, only=inner, trusted=trusted)
    result = Review(root, inner, state, check, warehouse=warehouse, tables=_tables(warehouse))
    result.problems += list(check.problems)
    result.card = _read_json(f"{root}/datacard.json")
    if result.card is None:
        result.problems.append("no data card (datacard.json)")
    else:
        if not result.card.get("disclosure", {}).get("passed", False):
            result.problems.append("the data card records a failed k-anonymity check")
        findings = card_check_findings(result.card)
        result.problems += findings.problems
        result.notes += findings.notes
        if result.card.get("pseudonym_key", {}).get("demo_key"):
            result.flags.append("made under the DEMO pseudonym key (imaging/pseudonym.py): not for real data")
    with quiet():  # pydicom's warnings quote header values: never printed from identifiable or released files
        _evidence(result, cache)

    # Decisions: signatures verified offline against the allowed signers, for exactly this release id.
    policy = policy or ApprovalPolicy.load()
    carried = approval_copy(root)
    if carried is not None and not any(DecisionText.parse(d.message.encode()).release_id == check.release_id
                                       for d in carried if _parses(d)):
        result.problems.append("APPROVAL.json approves other content than this release")
    if check.release_id:
        demo = bool((result.card or {}).get("pseudonym_key", {}).get("demo_key"))
        result.standing = standing_of(check.release_id, _decisions(result, carried), policy, demo)
        if result.state == "published" and not result.standing.approved:
            result.problems.append(f"published without its signed approvals: {result.standing.summary()}")
    if not warehouse:
        result.notes.append("IMAGING_WAREHOUSE not set: the identifiable zone (approval store, audit log, provenance "
                            "ledger, quarantine) was not read; shown is what the release itself proves")
    else:
        with quiet():
            _identifiable(result, cache)
    return result


def _parses(decision: SignedDecision) -> bool:
    try:
        DecisionText.parse(decision.message.encode())
        return True
    except (ApprovalError, UnicodeError):
        return False


def _evidence(result: Review, cache: EvidenceCache | None = None) -> None:
    """Recompute from the files: digest, metadata cross-checks, exact counts, k from metadata and headers."""
    root = result.root
    if result.release_id is None:
        return
    entries = read_manifest(root).entries
    try:
        table = read_metadata(root)
    except (OSError, ValueError):
        table = None
    result.problems += cross_check(root, entries, _read_json(f"{root}/release.json"), result.card, table)
    if table is None:
        return
    if result.file is not None and result.file.startswith("images/"):
        rows = [r for r in table.to_pylist() if r.get("file") == result.file]
        result.row = rows[0] if rows else None
        if result.row is None:
            result.problems.append("the file has no row in metadata.parquet")
    result.counts = exact_counts(table)
    _text_evidence(result, table)
    try:
        disclosure = _policy_disclosure()
    except (ConfigError, ValueError) as error:
        result.problems.append(f"the clinical policy cannot be read: {error}")
        return
    result.policy_min_k = disclosure.min_k
    missing = [q.released_as for q in disclosure.quasi_identifiers if q.released_as not in table.column_names]
    if missing:
        result.problems.append(f"the metadata lacks the quasi-identifier columns {', '.join(missing)}")
        return
    listed = {e.path for e in entries}
    present = table.filter(_in(table, listed))
    files = None if result.file is None else [result.file]
    from pydicom.errors import InvalidDicomError

    try:
        k = k_from_files(root, present, disclosure, files, labels=stamp_of(result.card), cache=cache,
                         sums={e.path: e.sha256 for e in entries})
    except (OSError, ValueError, InvalidDicomError) as error:  # not DICOM any more: fails the review, no crash
        result.problems.append(f"the released headers cannot be read: {type(error).__name__}")
        return
    result.k = k
    card_k = (result.card or {}).get("disclosure", {})
    min_k = int(card_k.get("min_k", disclosure.min_k))
    for keyword, files_finer in k.finer_headers:
        result.problems.append(f"{files_finer} released files hold {keyword} finer than the metadata k was computed on")
    for label, files_differ in k.label_mismatches:
        result.problems.append(f"{files_differ} released files hold the stamped label {label} otherwise than the "
                               f"metadata (the data card's 'Labels in the images')")
    if not k.same_as_metadata:
        result.problems.append("k recomputed from the released files differs from k over the metadata alone")
    if k.class_sizes and k.smallest < min_k:
        result.problems.append(f"k recomputed from the released files is {k.smallest}, below the release's minimum "
                               f"{min_k}")
    if min_k < disclosure.min_k:
        result.flags.append(f"the release's minimum k ({min_k}) is below the policy's ({disclosure.min_k}): "
                            f"IMAGING_MIN_K lowered it")


def _text_evidence(result: Review, table) -> None:
    """Burned-in text: counts per image type and the contact sheet, drawn from the released files."""
    from imaging.governance.contact_sheet import text_evidence

    if "pixel_text" not in table.column_names:
        result.notes.append("the metadata does not record what the burned-in text check did (a release made "
                            "before it was recorded): no contact sheet")
        return
    if result.file is not None:
        table = table.filter(_in(table, {result.file}))
    result.text = text_evidence(result.root, table, result.release_id or "")
    result.problems += result.text.problems
    result.notes += result.text.notes


def _in(table, paths: set[str]):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.is_in(table.column("file"), value_set=pa.array(sorted(paths), pa.string()))


def _identifiable(result: Review, cache: EvidenceCache | None = None) -> None:
    """The provenance ledger, per-attribute evidence, quarantine of the partitions read, audit log."""
    warehouse, root = result.warehouse, result.root
    if not result.release_id:
        return
    images = [e for e in read_manifest(root).entries
              if e.path.startswith("images/") and (result.file is None or e.path == result.file)]
    batches = sorted({p["batch"] for p in (result.card or {}).get("inputs", [])})
    from imaging.quarantine import file_token, read_token_key

    found = _lookup_by_name(result.tables, batches, {e.path.rsplit("/", 1)[-1] for e in images})
    token_key = read_token_key(warehouse)
    pairs = []
    for entry in images:
        records = found.get(entry.path.rsplit("/", 1)[-1]) or [(None, False)]
        for record, withdrawn in records:
            state = _landing_state(record, cache) if record else "not traced"
            token = file_token(token_key, record.source_path) if record and token_key else None
            result.traces.append(Trace(entry.path, entry.sha256, record, state, token, withdrawn))
            if state == "verified":
                pairs.append((record.source_path, f"{root}/{entry.path}", record.source_sha256, entry.sha256))
    untraced = sum(1 for t in result.traces if t.record is None)
    differs = sum(1 for t in result.traces if t.landing == "differs")
    absent = sum(1 for t in result.traces if t.landing == "absent")
    if untraced:
        result.problems.append(f"{untraced} images have no provenance ledger row")
    if differs:
        result.problems.append(f"{differs} landing files no longer have the checksum the ledger recorded")
    if absent:
        result.notes.append(f"{absent} landing files are no longer in the landing zone (checksums from the ledger)")
    from pydicom.errors import InvalidDicomError

    try:
        result.attributes = attribute_evidence(pairs, cache)  # headers only: the pixels are not compared
    except (OSError, ValueError, InvalidDicomError) as error:
        result.problems.append(f"the per-attribute evidence cannot be read: {type(error).__name__}")
    _optouts(result)
    site_days = {(t.record.date, t.record.site) for t in result.traces if t.record is not None}
    result.quarantine = quarantine_summary(result.tables, site_days)
    if result.text is not None:
        from imaging.governance.contact_sheet import add_quarantined

        add_quarantined(result.text, result.tables, site_days)
    result.arrived = arrived_columns(result.tables, site_days)
    # Each signer's stored review report is the one their signature names (identifiable zone).
    for decision in (*result.standing.approvals, *result.standing.rejections) if result.standing else ():
        report = stored_report(warehouse, decision.text)
        if report is None:
            result.notes.append(f"no stored review report for the {decision.text.kind} by {decision.text.principal}")
        elif hashlib.sha256(report.encode()).hexdigest() != decision.text.review_sha256:
            result.problems.append(f"the review report stored for the {decision.text.kind} by "
                                   f"{decision.text.principal} is not the one signed")
    log = audit.read_events(warehouse, result.release_id)
    result.audit_events = list(log.events)
    if log.broken:
        result.problems.append("the audit log's chain is broken: an event was removed or edited")


def _landing() -> str:
    """The landing zone the opt-out lists are read from: IMAGING_LANDING, or the contract's default."""
    from imaging.driver.config import DEFAULT_LANDING

    return _local(os.environ.get("IMAGING_LANDING", "").strip() or DEFAULT_LANDING)


def _optouts(result: Review) -> None:
    """Re-check, from the identifiable zone, that no released patient is on the opt-out list in force when the
    release was built, and count those who opted out since (imaging.governance.optout.recheck)."""
    from imaging.issuers import IssuerPolicy
    from imaging.optout import OPTOUTS, read_lists
    from imaging.driver.platform_files import load_quality_rules

    landing = _landing()
    try:
        issuers = IssuerPolicy.from_dict(read_yaml("issuers.yaml"))
        placeholders = load_quality_rules().placeholder_list
    except (ConfigError, ValueError) as error:
        result.problems.append(f"the opt-out re-check cannot read the platform's configuration: {error}")
        return
    fs, folder = fsx.filesystem(f"{landing}/{OPTOUTS}")
    list_sites = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(folder, detail=False)
                        if fs.isdir(p)) if fs.exists(folder) else []
    records = [t.record for t in result.traces]
    spaces = {}
    for site in {*list_sites, *(r.site for r in records if r is not None)}:
        try:
            spaces[site] = issuers.namespace(site)
        except ValueError:
            result.problems.append("a site of the opt-out lists or of the release has no patient-id namespace in "
                                   "platform/issuers.yaml: its patients cannot be matched")
    lists = read_lists(landing, [s for s in list_sites if s in spaces], placeholders)
    rc = result.optouts = recheck(result.card or {}, released_persons(result.tables, records, spaces), lists, spaces,
                                  sites_of_tokens(result.warehouse))
    if not rc.recorded:
        result.notes.append("the data card records no opt-out list (a release made before opt-outs were applied): "
                            "every released patient is checked against the lists now")
    if rc.lists_applied and not lists.files:
        result.problems.append(f"the data card names {rc.lists_applied} opt-out lists but the landing zone "
                               f"({OPTOUTS}/ under IMAGING_LANDING) holds none: the lists in force cannot be re-read")
    if rc.untraced and (lists.files or rc.lists_applied):  # with no list anywhere, nobody can be on one
        result.problems.append(f"{rc.untraced} released images could not be walked back to their patient "
                               f"(linked_patient_metadata): not checked against the opt-out list")
    if rc.on_list_at_build_images:
        result.problems.append(
            f"{rc.on_list_at_build_images} released images of {rc.on_list_at_build_patients} patients are on the "
            f"opt-out list in force when the release was built (each site's list files up to the day the data card "
            f"says its list was received)")
    if rc.since_patients and result.state == "held":
        result.problems.append(f"{rc.since_patients} patients of this held release have opted out since it was "
                               f"built: it will not be published; the next build leaves them out")
    elif rc.since_patients:
        result.flags.append(f"{rc.since_patients} {SINCE}: the next published_cohort run builds the next version "
                            f"without them, for approval")
    if rc.unmapped:
        result.notes.append(f"{rc.unmapped} opt-out lists of the data card name a site token the identifiable zone "
                            f"does not map: every unmapped site is checked against its files up to {rc.as_of}")
    if rc.lists_changed:
        result.notes.append(f"built before an opt-out list changed: {rc.lists_changed} sites' lists differ from those "
                            f"in force at the build (received on or before {rc.as_of or 'no list'}; newest now "
                            f"{rc.received_now}); {rc.since_patients} of its patients are affected")
    if rc.unreadable:
        result.notes.append(f"{rc.unreadable} opt-out list files cannot be read now: published_cohort releases "
                            f"nothing until they are fixed")


def _decision_lines(r: Review) -> list[str]:
    """The verdict, the problems, the flags and the decisions: what a reviewer reads first."""
    lines = [f"Result    {r.verdict}"]
    lines += [f"  problem: {p}" for p in r.all_problems]
    lines += [f"  FLAG: {f}" for f in r.all_flags]
    st = r.standing
    if st is None:
        lines.append("Approvals none readable")
    else:
        lines.append(f"Approvals {len(st.approvals)} of {st.required} required, signatures verified against the "
                     f"allowed signers (read from {r.decisions_from})")
        for d in (*st.approvals, *st.rejections):
            t = d.text
            lines.append(f"  {t.kind:7s} {t.principal} key {t.key_fingerprint}{' (DEMO KEY)' if d.demo_key else ''} "
                         f"at {t.signed_at}, review report {t.review_sha256[:16]}" + (f": {t.note}" if t.note else ""))
        if r.state == "held" and not st.rejected and not st.approved:
            lines.append("  waiting for `imaging-review approve PATH --key KEY` by listed approvers")
    return lines


def evidence_text(r: Review) -> str:
    """Everything the review found but the decisions: the report an approval signs (by its sha256)."""
    card = r.card or {}
    lines = [f"Release   {r.root}", f"State     {r.state}",
             f"Release id {r.release_id or '(none)'}   (sha256 of SHA256SUMS)"]
    if r.file:
        lines.append(f"File      {r.file}")
    scope = "every file" if r.file is None else "this file and the release's description files"
    lines.append(f"Checksums {r.check.checked} of {r.check.listed} listed files recomputed ({scope}"
                 + (f"; {r.check.trusted} unchanged since the run that placed them hashed them" if r.check.trusted
                    else "") + f"); {'no problems' if not r.check.problems else f'{len(r.check.problems)} problems'}")
    lines += [f"  problem: {p}" for p in r.problems]
    lines += [f"  FLAG: {f}" for f in r.flags]
    if card:
        lines += ["", f"Cohort    {card['cohort']} v{card['version']}: {card.get('description', '')}",
                  f"Selection {card['selection']['predicate']}",
                  f"Data digest {card['data_digest']} (recomputed from SHA256SUMS)"]
    if r.counts:
        c = r.counts
        lines.append(f"Counts    images {c.images}, patients {c.patients}, studies {c.studies}, series {c.series} "
                     f"(exact, from metadata.parquet)")
    if r.k:
        k = r.k
        lines.append(f"k-anonymity from the released files over ({', '.join(k.quasi_identifiers)}): smallest class "
                     f"{k.smallest}, {len(k.class_sizes)} classes, release minimum "
                     f"{card.get('disclosure', {}).get('min_k')}, policy minimum {r.policy_min_k}; "
                     f"{k.headers_read} headers read")
        lines.append(f"  class sizes (exact, no values): {', '.join(map(str, k.class_sizes)) or '(none)'}")
        lines.append(f"  over the metadata alone: {', '.join(map(str, k.metadata_sizes)) or '(none)'}"
                     + ("" if k.same_as_metadata else "  DIFFERS"))
    if card:
        d = card["deidentification"]
        key = card.get("pseudonym_key", {})
        lines.append(f"Profile   {d['standard']}; engine {d['engine']}")
        lines.append("Options   " + ", ".join(f"{o['name']} ({o['code']})" for o in d["options"]))
        lines.append(f"Pseudonym key fingerprint {key.get('fingerprint')}" + (" (DEMO KEY)" if key.get("demo_key") else ""))
        lines.append("Code      " + ", ".join(f"{a} {v}" for a, v in card["code_versions"].items()))
    lines += _optout_lines(card, r.optouts)
    if r.attributes:
        lines += ["", "Per-attribute evidence, landing file -> released file (files; no values):",
                  f"  {'attribute':40s} {'removed':>8s} {'replaced':>8s} {'shifted':>8s} {'kept':>8s} {'added':>8s}"]
        lines += [f"  {a.attribute:40s} {a.removed:8d} {a.replaced:8d} {a.shifted:8d} {a.kept:8d} {a.added:8d}"
                  for a in r.attributes]
    if r.text is not None:
        from imaging.governance.contact_sheet import text_lines

        lines += [""] + text_lines(r.text)
    if r.quarantine is not None:
        lines += ["", "Quarantine of the partitions the release read (files by reason):"]
        lines += [f"  {q.files:6d}  {q.table}: {q.reason}" for q in r.quarantine] or ["  (none)"]
    if card:
        lines += ["", "Checks (latest result of each):"]
        lines += [f"  {c['result']:13s} {c.get('severity', ''):5s} {c['asset']}:{c['check']} {_scope(c)} " + (
            f"run {c['run_id']} at {c['evaluated_at']}" if c["run_id"] else
            "(evaluated as the release was built)" if c.get("scope", "release") == "release" else "")
            for c in card["checks"]] or ["  (none recorded)"]
        lines += ["", "Inputs (partitions by batch token, data version, run, landing data version):"]
        lines += [f"  {p['asset']} {p['batch']} {p['data_version']} run {p['run_id']} at {p['materialized_at']}, "
                  f"landing data version {p.get('landing_data_version') or NOT_OBSERVED}" for p in card["inputs"]]
        lines += ["", "Runs:"] + [f"  {x['run_id']}: {'; '.join(x['did'])}" for x in card["runs"]]
    if r.row:
        lines += ["", "Metadata row of this file:"] + [f"  {k} = {v}" for k, v in r.row.items()]
    if r.traces:
        lines += ["", "Provenance (identifiable zone): release file <- de-identified output <- landing file (by its "
                      "keyed token: imaging-quarantine TOKEN, or imaging-review --identifiable, gives its path)"]
        for t in r.traces:
            if t.record is None:
                lines.append(f"  {t.file}  sha256 {t.sha256}  NOT TRACED")
                continue
            p = t.record
            lines += [f"  {t.file}  sha256 {t.sha256}",
                      f"    output   {p.output_path}  sha256 {p.output_sha256}"
                      + ("  (withdrawn from the de-identified zone since)" if t.withdrawn else ""),
                      f"    landing  file {t.token or NO_TOKEN}  sha256 {p.source_sha256} ({t.landing})",
                      f"    run {p.run_id} (started {p.run_started_at})  partition {p.date}|{p.site}  "
                      f"code {p.code_version}",
                      f"    profile {p.deid_profile}; options {p.deid_options}"]
    if r.notes:
        lines += [""] + [f"Note: {n}" for n in r.notes]
    return "\n".join(lines) + "\n"


def _optout_lines(card: dict, rc: Recheck | None) -> list[str]:
    """The opt-out lists the card says were applied, and the re-check from the identifiable zone."""
    section = card.get("optouts")
    if section is None and rc is None:
        return []
    lines = ["", "Opt-outs (data card: lists by keyed site token, keyed digest, day received; counts as published):"]
    if section is None:
        lines.append("  none recorded")
    else:
        lines += [f"  list {x['list']} version {x['version']} received {x['received']}" for x in section["lists"]] or [
            "  no list had been received"]
        lines.append(f"  lists in force at the build: each site's files up to the day its list was received "
                     f"(newest {section['as_of'] or '-'})")
        at_build, before = section["excluded_at_build"], section["not_deidentified"]
        lines.append(f"  left out at the build: images {at_build['images']}, patients {at_build['patients']}; never "
                     f"de-identified (every site-day): images {before['images']}, patients {before['patients']}")
        if section.get("follows"):
            f = section["follows"]
            lines.append(f"  follows v{f['version']}: {f['left']} of its patients opted out since, {f['returned']} back")
    if rc is not None:
        lines.append(f"  re-checked from the identifiable zone: {rc.images} released images of {rc.patients} patients "
                     f"against the landing's lists in force at the build: {rc.on_list_at_build_images} on them; "
                     f"{rc.since_patients} patients on the lists since")
    return lines


def report_sha256(r: Review) -> str:
    return hashlib.sha256(evidence_text(r).encode()).hexdigest()


def render_text(r: Review, identifiable: bool = False) -> str:
    """The verdict, problems and decisions first, then the evidence, then the evidence's sha256. With
    `identifiable`, a warning first and each landing file's path last, outside the report an approval signs."""
    lines = ([IDENTIFIABLE_VIEW, ""] if identifiable else []) + _decision_lines(r)
    if r.audit_events:
        lines += ["Audit log (identifiable zone):"]
        lines += [f"  {e.at} {e.event:8s}" + (f" by {e.principal}" if e.principal else "")
                  + (f": {e.detail}" if e.detail else "") for e in r.audit_events]
    text = ("\n".join(lines) + "\n\n" + evidence_text(r)
            + f"\nReview report sha256 {report_sha256(r)}   (the evidence above, from 'Release': what an approval signs)\n")
    if identifiable:
        traced = [t for t in r.traces if t.record is not None]
        text += ("\nLanding files (identifiable zone, not part of the signed report): token, path\n"
                 + "".join(f"  {t.token or NO_TOKEN}  {t.record.source_path}\n" for t in traced)
                 if traced else "\nLanding files: none traced (IMAGING_WAREHOUSE not set, or no ledger row)\n")
    return text


def _warehouse() -> str | None:
    value = os.environ.get("IMAGING_WAREHOUSE", "").strip()
    if not value:
        return None
    return value.rstrip("/") if "://" in value else os.path.abspath(os.path.expanduser(value))


def _tables(warehouse: str | None) -> str | None:
    """Where Spark's identifiable tables are: IMAGING_TABLES when set (tables apart from the files), else the
    warehouse. The held, approval and audit folders are always under the warehouse."""
    if not warehouse:
        return None
    value = os.environ.get("IMAGING_TABLES", "").strip()
    return _local(value) if value else warehouse


def _local(path: str) -> str:
    return path.rstrip("/") if "://" in path else os.path.abspath(os.path.expanduser(path))


@dataclass(frozen=True)
class Signed:
    """A decision just recorded: its text, where it was stored, the review it was made on."""

    text: DecisionText
    stored: str
    standing: Standing


def sign_decision(path: str, kind: str, key: str, note: str | None = None, *, policy: ApprovalPolicy | None = None,
                  seen: str | None = None, now: dt.datetime | None = None) -> Signed:
    """Review the held release at `path`, then sign and record an approval or a rejection of it.

    Refused: a key the allowed signers do not list, an approval of a release whose review fails or
    that is rejected, a second decision of the same kind by the same principal. The signed text
    names the release id and the sha256 of the review report (the evidence `imaging-review PATH`
    prints, which is stored beside the signature in the identifiable zone). `seen`: the sha256 the
    signer read on their report; refused when the review now says anything else.
    """
    if kind not in (APPROVE, REJECT):
        raise ApprovalError(f"unknown decision {kind!r}")
    note = (note or "").strip() or None
    if kind == REJECT and not note:
        raise ApprovalError("a rejection needs its reason (--reason)")
    if note is not None and len(note) > 2000:
        raise ApprovalError("a note is at most 2000 characters")
    path = path.rstrip("/")
    warehouse = warehouse_of_held(path)
    policy = policy or ApprovalPolicy.load()
    try:
        public = public_key_of(key)
    except (OSError, ValueError) as error:
        raise ApprovalError(f"cannot read the key: {error}") from error
    signer = policy.signers.principal_of(public)
    if signer is None:
        raise ApprovalError(f"the key {fingerprint(public)} is not listed in the allowed signers "
                            f"({policy.signers.source}, IMAGING_APPROVERS): nothing recorded")
    result = review(path, warehouse, policy)
    if result.release_id is None or path.rsplit("/", 1)[-1] != result.release_id:
        raise ApprovalError("the held folder's name is not its release id: nothing recorded")
    if kind == APPROVE and not result.ok:
        raise ApprovalError(f"the review fails ({len(result.all_problems)} problems, e.g. "
                            f"{'; '.join(result.all_problems[:2])}; see `imaging-review {path}`): nothing approved")
    if kind == APPROVE and result.standing is not None and result.standing.rejected:
        raise ApprovalError("the release is rejected: it is never approved or published")
    done = {d.text.principal for d in (result.standing.approvals if kind == APPROVE else result.standing.rejections)}
    if signer.principal in done:
        raise ApprovalError(f"{signer.principal} has already signed a decision '{kind}' on this release: "
                            f"a second one is refused (approvals come from different people)")
    if seen is not None and seen.strip().lower() != report_sha256(result):
        raise ApprovalError("the review report is not the one you read (its sha256 differs): read it again, "
                            "nothing recorded")
    info = json.loads(fsx.read_bytes(f"{path}/release.json"))
    text = DecisionText(kind, result.release_id, str(info["cohort"]), int(str(info["release"]).lstrip("v")),
                        report_sha256(result), signer.principal, fingerprint(public),
                        (now or dt.datetime.now(dt.timezone.utc)).replace(microsecond=0).isoformat(), note)
    try:
        signature = sign(text.render(), key)
        if verify_signature(text.render(), signature).public_key != public:
            raise SignatureError("the signature was made with another key than the one named")
    except SignatureError as error:
        raise ApprovalError(f"cannot sign: {error}") from error
    stored = store_decision(warehouse, text, signature, evidence_text(result))
    audit.record(warehouse, kind, text.release_id, text.cohort, text.version, principal=text.principal,
                 key_fingerprint=text.key_fingerprint, detail=note)
    standing = standing_of(text.release_id, load_decisions(warehouse, text.release_id), policy,
                           bool((result.card or {}).get("pseudonym_key", {}).get("demo_key")))
    return Signed(text, stored, standing)


def render_diff(old: dict, new: dict) -> str:
    """Two versions of a cohort, side by side: rows, patients, columns, options, code versions, selection."""
    both = old["patients"] & new["patients"]
    lines = [f"Old       {old['cohort']} {old['release']}", f"New       {new['cohort']} {new['release']}",
             f"Rows      {old['rows']} -> {new['rows']} ({new['rows'] - old['rows']:+d})",
             f"Patients  {len(old['patients'])} -> {len(new['patients'])}: {len(both)} in both, "
             f"{len(new['patients'] - both)} added, {len(old['patients'] - both)} removed"]
    added = [c for c in new["columns"] if c not in old["columns"]]
    removed = [c for c in old["columns"] if c not in new["columns"]]
    lines.append("Columns   " + ("unchanged" if not added and not removed else
                                 f"added {', '.join(added) or '-'}; removed {', '.join(removed) or '-'}"))
    lines.append("Options   " + ("unchanged" if old["options"] == new["options"] else
                                 f"{', '.join(old['options'])} -> {', '.join(new['options'])}"))
    assets = sorted(set(old["code_versions"]) | set(new["code_versions"]))
    changed = [a for a in assets if old["code_versions"].get(a) != new["code_versions"].get(a)]
    lines.append("Code      " + ("unchanged" if not changed else "; ".join(
        f"{a} {old['code_versions'].get(a, '-')} -> {new['code_versions'].get(a, '-')}" for a in changed)))
    lines.append("Selection " + ("unchanged" if old["selection"] == new["selection"] else
                                 f"{old['selection']} -> {new['selection']}"))
    lines.append("Minimum k " + ("unchanged" if old["min_k"] == new["min_k"] else f"{old['min_k']} -> {new['min_k']}"))
    lines.append("Data      " + ("the same data digest" if old["data_digest"] == new["data_digest"] else
                                 "different data digests"))
    return "\n".join(lines) + "\n"


COMMANDS = """commands:
  imaging-review PATH [--html OUT] [--identifiable]         review a release folder or one file of it
  imaging-review pending                                    held releases: path, cohort, version, id, status
  imaging-review approve PATH --key PRIVATE_KEY [--note T]  sign an approval of a held release
  imaging-review reject PATH --key PRIVATE_KEY --reason T   sign a rejection: never published
  imaging-review diff OLD NEW                               compare two versions of a cohort
  imaging-review demo-keys DIR                              write the two DEMO approver keys and their
                                                            allowed-signers file (demo only)

After the approvals, publish by materializing the cohort's partition of published_cohort (one partition a cohort
file): every cohort at once from the shell with `dagster asset materialize -m definitions --select published_cohort
--partition-range FIRST...LAST` (cohort names in name order), or from the UI with a backfill of job `publish`.
The same review, as Markdown, is on each cohort's materialization in the Dagster UI.

Run `imaging-review COMMAND --help` for a command's options."""


def _sign_command(name: str, argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=f"imaging-review {name}", description=(
        "Review a held release, then sign an approval of its exact content with an OpenSSH key listed in "
        "IMAGING_APPROVERS' allowed-signers file." if name == APPROVE else
        "Sign a rejection of a held release: it is never published."))
    parser.add_argument("path", help="a held release folder (from `imaging-review pending`)")
    parser.add_argument("--key", required=True, help="your OpenSSH private key (Ed25519), e.g. ~/.ssh/id_ed25519")
    parser.add_argument("--report-sha256", default=None, dest="seen",
                        help="the sha256 on the last line of the report you read: refused if the review now differs")
    if name == APPROVE:
        parser.add_argument("--note", default=None, help="an optional note (a ticket, a condition)")
    else:
        parser.add_argument("--reason", required=True, help="why the release is rejected")
    args = parser.parse_args(argv)
    try:
        signed = sign_decision(_local(args.path), name, args.key, args.note if name == APPROVE else args.reason,
                               seen=args.seen)
    except (ApprovalError, FileNotFoundError) as error:
        print(f"imaging-review: {error}", file=sys.stderr)
        return 1
    t, st = signed.text, signed.standing
    did = "approved" if name == APPROVE else "rejected"
    print(f"{did} {t.cohort} v{t.version} release {t.release_id} as {t.principal} (key {t.key_fingerprint}); "
          f"signed over review report {t.review_sha256}")
    if name == REJECT:
        print("the release is rejected: it is never published")
    elif st.approved:
        print(f"{st.summary()}: the next materialization of its cohort's partition of published_cohort publishes it "
              f"(every cohort at once: README, 'Running it on your data')")
    else:
        print(f"{st.summary()}: not published until {st.required} listed approvers have signed")
    return 0


def main(argv: list[str] | None = None) -> int:
    from imaging.deid.quiet import silence_for_process

    silence_for_process()  # headers of identifiable and released files are read: no library warning quotes one
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["pending"]:
        parser = argparse.ArgumentParser(prog="imaging-review pending",
                                         description="Held releases, one a line: path, cohort, version, id, status.")
        parser.add_argument("--warehouse", default=None, help="warehouse root [IMAGING_WAREHOUSE]")
        args = parser.parse_args(argv[1:])
        warehouse = _local(args.warehouse) if args.warehouse else _warehouse()
        if not warehouse:
            parser.error("set IMAGING_WAREHOUSE (held releases are in its identifiable zone) or pass --warehouse")
        try:
            held_releases = list_held(warehouse)
        except ApprovalError as error:  # an unreadable allowed-signers file: named, not a traceback
            print(f"imaging-review: {error}", file=sys.stderr)
            return 1
        for held in held_releases:
            print("\t".join([held.path, held.cohort, f"v{held.version}", held.release_id, held.status]))
        return 0
    if argv[:1] in (["approve"], ["reject"]):
        return _sign_command(argv[0], argv[1:])
    if argv[:1] == ["diff"]:
        parser = argparse.ArgumentParser(prog="imaging-review diff",
                                         description="Compare two versions of a cohort (release folders).")
        parser.add_argument("old")
        parser.add_argument("new")
        args = parser.parse_args(argv[1:])
        try:
            old, new = (release_summary(find_bundle_root(_local(p)).root) for p in (args.old, args.new))
        except (FileNotFoundError, ValueError) as error:
            print(f"imaging-review: {error}", file=sys.stderr)
            return 1
        sys.stdout.write(render_diff(old, new))
        return 0
    if argv[:1] == ["demo-keys"]:
        from imaging.governance.signing import write_demo_keys

        parser = argparse.ArgumentParser(prog="imaging-review demo-keys", description=(
            "Write the two DEMO approver keys (public seeds: anybody can make them) and an allowed-signers file "
            "listing them into DIR. For the demo only: the review flags their fingerprints."))
        parser.add_argument("dir")
        args = parser.parse_args(argv[1:])
        print(write_demo_keys(_local(args.dir)))
        return 0
    parser = argparse.ArgumentParser(prog="imaging-review", description=__doc__.splitlines()[0],
                                     usage="imaging-review {PATH [--html OUT] | pending | approve | reject | diff | "
                                           "demo-keys} ...",
                                     epilog=COMMANDS, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", help="a release folder or one file of a release")
    parser.add_argument("--html", default=None, help="also write a self-contained HTML report here")
    parser.add_argument("--identifiable", action="store_true",
                        help="also print each landing file's path (operators in the identifiable zone; outside the "
                             "signed report)")
    args = parser.parse_args(argv)
    try:
        result = review(_local(args.path), _warehouse())
    except (FileNotFoundError, ApprovalError) as error:
        print(f"imaging-review: {error}", file=sys.stderr)
        return 1
    sys.stdout.write(render_text(result, identifiable=args.identifiable))
    if args.html:
        from imaging.governance.review_html import render_html

        os.makedirs(os.path.dirname(os.path.abspath(args.html)), exist_ok=True)
        with open(args.html, "w", encoding="utf-8") as handle:
            handle.write(render_html(result))
        print(f"HTML report: {args.html}")
    return 0 if result.verdict == VERIFIED else 1


if __name__ == "__main__":
    sys.exit(main())
