"""The PACS ingest over DIMSE against a real Orthanc's DICOM port, and `imaging-receive` (the C-STORE receiver).

One Orthanc for the module (Debian's `orthanc`, loopback) with its DICOM port on, knowing only our AE titles
(`DicomModalities`, no `DicomAlwaysAllow*`, the called AE title checked), holding site-b's two days. The same
instances are also "landed by hand" as a hospital's engineer would script it: dcmtk's `getscu` (bit-preserving)
into a file landing. DIMSE carries a data set, not a file: its bytes as the PACS sends them are what both sides
land, each behind the file meta its own implementation writes. So the landed data sets equal getscu's byte for
byte, and every step's output equals the hand landing's, the source file's own identity (path, size, sha256:
the file meta) mapped. `imaging-receive` runs as its console script, as deployed. Tests build on each other
in file order (one module world).
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

from compare import Output, collect, rewritten
from conftest import ROOT
from imaging.catalogue import PACS_LANDING, RAW_IMAGE_INDEX
from services import LOOPBACK, free_port, orthanc_available, orthanc_server, port_open, skip_unless, wait_until
from test_pacs import DATES, PIPELINE, SITE, failure, materialize, materializations, outcomes, pacs_assets

BASE = ROOT / "pacs-dimse"
CALLING, RECEIVER, HAND, PUSHER = "IMAGING", "IMAGING-RECV", "HAND", "STORESCU"
PUSH_SITE = "site-a"  # pushes to imaging-receive land as this (file-landing) site
PAIRS = [(d, SITE) for d in DATES]
BIN = Path(sys.executable).parent
DCMTK = all(shutil.which(t) for t in ("getscu", "storescu"))


def test_pacs_yaml_dimse_sites_and_the_receiver_are_checked_naming_file_and_field():
    from imaging.config_files import ConfigError, read_raw, validate
    from imaging.pacs.settings import PacsFile, load_pacs

    base = read_raw("pacs.yaml")
    dimse = {"protocol": "dimse", "host": "pacs.example", "port": 104, "called_ae": "HEYEX", "calling_ae": CALLING}
    good = validate(PacsFile, {**base, "servers": {SITE: {**dimse, "retrieve": "c-move", "move_destination": RECEIVER}}},
                    "platform/pacs.yaml")
    settings = load_pacs(good, [PUSH_SITE, SITE], {}, "/w")
    address = settings.server(SITE).dimse
    assert (address.called_ae, address.retrieve, address.spool) == ("HEYEX", "c-move", "/w/identifiable/pacs_spool")
    wrong = {
        "port": ({**dimse, "port": "104"}, "servers.site-b.port: must be a whole number"),
        "missing": ({k: v for k, v in dimse.items() if k != "called_ae"}, "protocol dimse needs called_ae"),
        "move": ({**dimse, "retrieve": "c-move"}, "retrieve: c-move needs move_destination"),
        "mixed": ({**dimse, "url": "https://pacs/dicom-web"}, "url: DICOMweb keys, but protocol is dimse"),
        "ae": ({**dimse, "calling_ae": "A\\B"}, "servers.site-b.calling_ae: must match"),
        "long": ({**dimse, "called_ae": "X" * 17}, "servers.site-b.called_ae: must match"),
        "unknown": ({**dimse, "retreive": "c-get"}, "servers.site-b.retreive: unknown key"),
    }
    for name, (server, message) in wrong.items():
        with pytest.raises(ConfigError) as error:
            validate(PacsFile, {**base, "servers": {SITE: server}}, "platform/pacs.yaml")
        assert message in str(error.value) and "platform/pacs.yaml" in str(error.value), name
    with pytest.raises(ConfigError, match="receiver.senders\\[0\\].addresses"):
        validate(PacsFile, {**base, "receiver": {"ae_title": RECEIVER, "senders": [
            {"ae_title": PUSHER, "addresses": ["not-an-address"]}]}}, "platform/pacs.yaml")
    both = validate(PacsFile, {**base, "servers": {SITE: dimse}, "receiver": {"ae_title": RECEIVER, "senders": [
        {"ae_title": PUSHER, "addresses": ["10.0.0.0/8"], "site": SITE}]}}, "platform/pacs.yaml")
    with pytest.raises(ValueError, match="a site is pulled or pushed, not both"):
        load_pacs(both, [SITE], {}, "/w")


# --- the module's world ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def receiver_port():
    return free_port()


@pytest.fixture(scope="module")
def pacs(receiver_port):
    skip_unless(orthanc_available(), "Orthanc is not installed (orthanc, orthanc-dicomweb)")
    skip_unless(DCMTK, "dcmtk is not installed (getscu, storescu)")
    shutil.rmtree(BASE, ignore_errors=True)
    peers = {"platform": (CALLING, LOOPBACK, 104), "receiver": (RECEIVER, LOOPBACK, receiver_port),
             "hand": (HAND, LOOPBACK, 104)}
    with orthanc_server(dicom_modalities=peers) as server:
        yield server


@pytest.fixture(scope="module")
def uploaded(pacs):
    """site-b's two days in Orthanc (REST); {SOP Instance UID: (date, uploaded path)}."""
    import pydicom

    from synth import generate_hospital

    generated = BASE / "generated"
    generate_hospital(generated, seed=5, sites=(SITE,), dates=DATES, patients_per_site=3)
    found = {}
    with requests.Session() as session:
        session.auth = (pacs.user, pacs.password)
        for path in sorted(p for p in (generated / "images").rglob("*") if p.is_file()):
            if session.post(f"{pacs.rest}/instances", data=path.read_bytes()).status_code == 200:
                ds = pydicom.dcmread(path, stop_before_pixels=True)
                found[str(ds.SOPInstanceUID)] = (path.relative_to(generated / "images" / SITE).parts[0], path)
    assert len(found) >= 6
    return found


@pytest.fixture(scope="module")
def hand(pacs, uploaded):
    """The hand landing: each study retrieved with dcmtk's getscu (C-GET, bit-preserving) into
    images/<site>/<date>/, and the clinical extracts. {SOP Instance UID: path}."""
    import pydicom

    root = BASE / "hand-landing"
    shutil.copytree(BASE / "generated" / "clinical", root / "clinical")
    studies = {}
    for sop, (date, path) in uploaded.items():
        studies[str(pydicom.dcmread(path, stop_before_pixels=True).StudyInstanceUID)] = date
    for study, date in sorted(studies.items()):
        folder = root / "images" / SITE / date
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["getscu", "-aet", HAND, "-aec", pacs.aet, LOOPBACK, str(pacs.dicom_port), "-S", "+B",
                               "-k", "QueryRetrieveLevel=STUDY", "-k", f"StudyInstanceUID={study}", "-od", str(folder)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
    landed = {}
    for path in (root / "images").rglob("*"):
        if path.is_file():
            landed[str(pydicom.dcmread(path, stop_before_pixels=True).SOPInstanceUID)] = path
    assert set(landed) == set(uploaded)
    return landed


def data_set(data: bytes) -> bytes:
    """A Part 10 file's bytes after its file meta: the data set as the network carried it."""
    from pydicom.filereader import _read_file_meta_info, read_preamble

    handle = io.BytesIO(data)
    read_preamble(handle, False)
    _read_file_meta_info(handle)
    return data[handle.tell():]


def meta(data: bytes) -> tuple:
    import pydicom

    m = pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True).file_meta
    return str(m.MediaStorageSOPClassUID), str(m.MediaStorageSOPInstanceUID), str(m.TransferSyntaxUID)


def dimse_resource(pacs, warehouse: Path, retrieve: str = "c-get", called_ae: str | None = None, port: int | None = None,
                   max_connections: int = 2):
    from resources.pacs import DimseSite, PacsServers

    site = DimseSite(host=LOOPBACK, port=port or pacs.dicom_port, called_ae=called_ae or pacs.aet, calling_ae=CALLING,
                     retrieve=retrieve, move_destination=RECEIVER if retrieve == "c-move" else "",
                     spool=f"{warehouse}/identifiable/pacs_spool" if retrieve == "c-move" else "")
    return PacsServers(dimse={SITE: site}, max_connections={SITE: max_connections}, retries=1, backoff_seconds=0.05,
                       timeout_seconds=10, sensor_days=2000, landing=f"{warehouse}/{PACS_LANDING.path}")


def dimse_defs(defs, pacs, warehouse: Path, **site):
    from dagster import Definitions

    from resources.landing import LandingZone
    from resources.warehouse import Warehouse

    clinical = BASE / "pacs-file-landing"
    if not clinical.exists():
        shutil.copytree(BASE / "generated" / "clinical", clinical / "clinical")
    root = f"{warehouse}/{PACS_LANDING.path}"
    resources = {**defs.resources, "warehouse": Warehouse(root=str(warehouse)),
                 "landing": LandingZone(root=str(clinical), files_per_task=64, pacs_root=root, pacs_sites=[SITE]),
                 "pacs": dimse_resource(pacs, warehouse, **site)}
    return Definitions(assets=pacs_assets(defs), asset_checks=defs.asset_checks, resources=resources,
                       executor=defs.executor)


def landed(warehouse: Path) -> dict[str, Path]:
    """The PACS landing's files by SOP Instance UID."""
    import pydicom

    root = warehouse / PACS_LANDING.path
    return {str(pydicom.dcmread(p, stop_before_pixels=True).SOPInstanceUID): p for p in root.rglob("*") if p.is_file()}


# --- C-FIND / C-GET -----------------------------------------------------------------------------------------

def test_c_get_lands_every_instance_as_the_pacs_sends_it(defs, pacs, uploaded, hand):
    warehouse = BASE / "warehouse-get"
    result = materialize(dimse_defs(defs, pacs, warehouse), ["pacs_landing"])
    assert result.success
    files = landed(warehouse)
    assert set(files) == set(uploaded)
    for sop, path in files.items():
        got, want = path.read_bytes(), hand[sop].read_bytes()
        assert data_set(got) == data_set(want)  # the data set byte for byte as getscu received it
        assert meta(got) == meta(want)  # same class, instance and transfer syntax; only the writer differs
        assert path.parent.name == uploaded[sop][0] and path.parent.parent.name == SITE  # the landing layout
    rows = outcomes(warehouse)
    assert len(rows) == len(uploaded) and {r["outcome"] for r in rows} == {"fetched"}
    facts = materializations(result)
    assert sorted(facts) == sorted(f"{d}|{SITE}" for d in DATES)
    for fact in facts.values():
        assert fact["listed"] == fact["fetched"] > 0 and fact["failed"] == 0
    assert not any(sop in repr(facts) for sop in uploaded)  # no UID in the metadata
    # Again: nothing changed in the PACS, nothing fetched, the same data versions.
    again = materialize(dimse_defs(defs, pacs, warehouse), ["pacs_landing"])
    assert {r["outcome"] for r in outcomes(warehouse)} == {"unchanged"}
    assert {p: f["data_version"] for p, f in materializations(again).items()} == \
        {p: f["data_version"] for p, f in facts.items()}


def test_every_step_equals_the_same_instances_landed_by_hand(defs, pacs, uploaded, hand):
    from dagster import Definitions

    from resources.landing import LandingZone
    from resources.warehouse import Warehouse

    warehouse, hand_warehouse = BASE / "warehouse-get", BASE / "hand-warehouse"
    assert materialize(dimse_defs(defs, pacs, warehouse), PIPELINE).success
    hand_defs = Definitions(assets=defs.assets, asset_checks=defs.asset_checks, executor=defs.executor, resources={
        **defs.resources, "landing": LandingZone(root=str(BASE / "hand-landing"), files_per_task=64),
        "warehouse": Warehouse(root=str(hand_warehouse))})
    assert materialize(hand_defs, PIPELINE).success
    # The source file's own identity: where it is, and its sha256 and size (its file meta differs by writer).
    files = landed(warehouse)
    rewrite = {}
    sizes = {}
    for sop, path in files.items():
        rewrite[str(path)] = str(hand[sop])
        rewrite[hashlib.sha256(path.read_bytes()).hexdigest()] = hashlib.sha256(hand[sop].read_bytes()).hexdigest()
        sizes[(str(hand[sop]), path.stat().st_size)] = hand[sop].stat().st_size
    got = {k: sized(rewritten(v, rewrite), sizes) for k, v in collect(str(warehouse), PAIRS).items() if "pacs_" not in k}
    want = collect(str(hand_warehouse), PAIRS)
    assert sorted(got) == sorted(want)
    assert any("anonymized_images/files" in k for k in got) and any(k.startswith(RAW_IMAGE_INDEX.path) for k in got)
    assert [k for k in got if got[k] != want[k]] == []  # de-identified files by sha256, tables by rows


def sized(output: Output, sizes: dict) -> Output:
    """A table's rows with a landed file's size replaced by the hand-landed file's, in rows naming that file."""
    if output.kind != "rows":
        return output
    rows = []
    for row in output.value:
        paths = [v for v in row.values() if isinstance(v, str)]
        rows.append({k: next((sizes[(p, v)] for p in paths if (p, v) in sizes), v) if isinstance(v, int) else v
                     for k, v in row.items()})
    return Output("rows", sorted(rows, key=repr))


def test_a_wrong_called_ae_title_is_a_clear_error_and_lands_nothing(defs, pacs, uploaded):
    warehouse = BASE / "warehouse-wrong-ae"
    result = materialize(dimse_defs(defs, pacs, warehouse, called_ae="NOT-THE-PACS"), ["pacs_landing"])
    assert not result.success
    message = failure(result)
    assert "PACS of site site-b rejected the association (called AE NOT-THE-PACS, calling AE IMAGING)" in message
    assert "Called AE title not recognised" in message
    assert not (warehouse / PACS_LANDING.path).exists() and outcomes(warehouse) == []


class Relay:
    """A loopback TCP relay before Orthanc's DICOM port. Once `armed`, it kills Orthanc (SIGKILL) when `limit`
    bytes have come back from it: a server stopped in the middle of the retrievals."""

    def __init__(self, pacs, limit: int):
        self.pacs, self.limit, self.armed, self.passed, self.killed = pacs, limit, False, 0, False
        self.lock = threading.Lock()
        self.listener = socket.create_server((LOOPBACK, 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((LOOPBACK, self.pacs.dicom_port))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source, target, downstream: bool):
        try:
            while chunk := source.recv(65536):
                target.sendall(chunk)
                if downstream and self.armed:
                    with self.lock:
                        self.passed += len(chunk)
                        if self.passed >= self.limit and not self.killed:
                            self.killed = True
                            self.pacs.kill()
        except OSError:
            pass
        finally:
            for end in (source, target):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.listener.close()


def test_a_server_stopped_mid_transfer_leaves_nothing_and_the_next_run_resumes(defs, pacs, uploaded, monkeypatch):
    from imaging.pacs import listing

    warehouse = BASE / "warehouse-stopped"
    relay = Relay(pacs, limit=60_000)  # past the first instance (~36 kB each), into the second
    monkeypatch.setattr(listing, "on_listed", lambda site_days, instances: setattr(relay, "armed", True))
    try:
        result = materialize(dimse_defs(defs, pacs, warehouse, port=relay.port), ["pacs_landing"])
    finally:
        relay.close()
        monkeypatch.undo()
    assert relay.killed and relay.passed >= 60_000  # it did stop in the middle of the retrievals
    assert not result.success
    assert "PACS of site site-b unavailable (no association after 2 attempts)" in failure(result)
    assert not (warehouse / PACS_LANDING.path).exists() and outcomes(warehouse) == []  # nothing committed
    pacs.restart()
    again = materialize(dimse_defs(defs, pacs, warehouse), ["pacs_landing"])
    assert again.success
    assert set(landed(warehouse)) == set(uploaded) and {r["outcome"] for r in outcomes(warehouse)} == {"fetched"}
    staging = warehouse / "identifiable" / "_staging"  # the failed run's staged files are gone too
    assert not staging.exists() or not any(staging.rglob("*.dcm"))


def test_the_pacs_sensor_lists_dimse_site_days(pacs, uploaded):
    from dagster import DagsterInstance, build_sensor_context

    from automation.pacs_sensor import pacs_sensor

    resource = dimse_resource(pacs, BASE / "warehouse-sensor")
    with DagsterInstance.ephemeral() as instance:
        first = pacs_sensor(build_sensor_context(instance=instance, resources={"pacs": resource}))
        assert sorted(r.run_key.split("@")[0] for r in first.run_requests) == [f"{d}|{SITE}" for d in DATES]
        again = pacs_sensor(build_sensor_context(instance=instance, resources={"pacs": resource}, cursor=first.cursor))
        assert again.run_requests == []


# --- imaging-receive: C-MOVE answers and pushes ---------------------------------------------------------------

@pytest.fixture(scope="module")
def receiver(pacs, receiver_port):
    """`imaging-receive` as deployed: its console script, platform/ with a receiver and site-b as a C-MOVE site,
    listening on loopback; senders: Orthanc (answers our C-MOVEs, pushes as site-a) and storescu (site-a)."""
    platform = BASE / "platform"
    shutil.copytree(Path(__file__).resolve().parents[1] / "platform", platform, dirs_exist_ok=True)
    config = yaml.safe_load((platform / "pacs.yaml").read_text())
    config["servers"] = {SITE: {"protocol": "dimse", "host": LOOPBACK, "port": pacs.dicom_port, "called_ae": pacs.aet,
                                "calling_ae": CALLING, "retrieve": "c-move", "move_destination": RECEIVER}}
    config["receiver"] = {"ae_title": RECEIVER, "host": LOOPBACK, "port": receiver_port, "senders": [
        {"ae_title": pacs.aet, "addresses": ["127.0.0.1"], "site": PUSH_SITE},
        {"ae_title": PUSHER, "addresses": ["127.0.0.0/8"], "site": PUSH_SITE}]}
    (platform / "pacs.yaml").write_text(yaml.safe_dump(config))
    landing, warehouse = BASE / "receive-landing", BASE / "warehouse-move"
    env = {**os.environ, "IMAGING_PLATFORM_DIR": str(platform), "IMAGING_LANDING": str(landing),
           "IMAGING_WAREHOUSE": str(warehouse), "IMAGING_SITES": f"{PUSH_SITE},{SITE}"}
    log = BASE / "receive.log"
    proc = subprocess.Popen([str(BIN / "imaging-receive")], env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_until(lambda: port_open(receiver_port), "imaging-receive", 60, [log], alive=lambda: proc.poll() is None)
        yield {"landing": landing, "warehouse": warehouse, "log": log, "proc": proc}
    finally:
        proc.terminate()
        proc.wait(20)


def test_c_move_to_imaging_receive_lands_the_same_bytes_as_c_get(defs, pacs, uploaded, receiver):
    warehouse = receiver["warehouse"]
    result = materialize(dimse_defs(defs, pacs, warehouse, retrieve="c-move"), ["pacs_landing"])
    assert result.success, failure(result)
    moved, got = landed(warehouse), landed(BASE / "warehouse-get")
    assert set(moved) == set(uploaded)
    for sop, path in moved.items():  # the same instance lands as the same file, C-GET or C-MOVE
        assert path.read_bytes() == got[sop].read_bytes()
        assert path.relative_to(warehouse) == got[sop].relative_to(BASE / "warehouse-get")
    assert {r["outcome"] for r in outcomes(warehouse)} == {"fetched"}
    spool = warehouse / "identifiable" / "pacs_spool"
    assert not [p for p in spool.glob("*") if p.is_file()]  # taken from the spool, none left behind


def push(pacs, instances: list[str]) -> dict:
    """Orthanc sends instances (its ids) to imaging-receive by C-STORE (its REST API: /modalities/receiver/store)."""
    response = requests.post(f"{pacs.rest}/modalities/receiver/store", json={"Resources": instances, "Synchronous": True},
                             auth=(pacs.user, pacs.password), timeout=120)
    return {"status": response.status_code, **(response.json() if response.content else {})}


def test_orthanc_pushing_to_imaging_receive_lands_every_instance_and_a_resend_changes_nothing(pacs, uploaded,
                                                                                           receiver):
    from dagster import DagsterInstance, build_sensor_context

    from automation.landing_sensor import landing_sensor
    from resources.landing import LandingZone

    ids = requests.get(f"{pacs.rest}/instances", auth=(pacs.user, pacs.password)).json()
    assert push(pacs, ids)["status"] == 200
    landing = receiver["landing"]
    files = {p: p.stat() for p in (landing / "images").rglob("*") if p.is_file()}
    by_sop = {}
    for path in files:
        import pydicom

        by_sop[str(pydicom.dcmread(path, stop_before_pixels=True).SOPInstanceUID)] = path
    assert set(by_sop) == set(uploaded)
    got = landed(BASE / "warehouse-get")
    for sop, path in by_sop.items():  # the date from StudyDate, the name a digest, the bytes as C-GET lands them
        assert path.relative_to(landing).parts[:3] == ("images", PUSH_SITE, uploaded[sop][0])
        assert path.name == got[sop].name and path.read_bytes() == got[sop].read_bytes()
    assert not any((landing / ".imaging-receive").iterdir())  # no temporary file left
    # A resend: every instance answered success, nothing rewritten.
    assert push(pacs, ids)["status"] == 200
    assert {p: (s.st_ino, s.st_mtime_ns) for p, s in files.items()} == \
        {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (landing / "images").rglob("*") if p.is_file()}
    # The landing sensor picks the pushed site-days up as it does any landed files.
    with DagsterInstance.ephemeral() as instance:
        sensed = landing_sensor(build_sensor_context(instance=instance, resources={
            "landing": LandingZone(root=str(landing), files_per_task=64)}))
    assert sorted(r.run_key.split("@")[0] for r in sensed.run_requests) == [f"{d}|{PUSH_SITE}" for d in DATES]
    log = receiver["log"].read_text()
    assert f"association from AE {pacs.aet} ended: {len(ids)} stored, 0 unchanged" in log
    assert f"association from AE {pacs.aet} ended: 0 stored, {len(ids)} unchanged" in log
    assert not any(sop in log for sop in uploaded)  # no UID (nor any other value of a file) in its log


def storescu(receiver_port: int, calling: str, *files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["storescu", "-v", "-aet", calling, "-aec", RECEIVER, LOOPBACK, str(receiver_port),
                           *map(str, files)], capture_output=True, text=True, timeout=60)


def test_storescu_is_a_second_sender_and_an_unlisted_ae_title_or_a_bad_date_is_refused(uploaded, receiver,
                                                                                      receiver_port, tmp_path):
    import pydicom

    landing = receiver["landing"]
    before = sorted(p for p in (landing / "images").rglob("*") if p.is_file())
    sop, (date, path) = sorted(uploaded.items())[0]
    # An unlisted AE title: the association is rejected, nothing lands.
    refused = storescu(receiver_port, "STRANGER", path)
    assert refused.returncode != 0 and "Association Rejected" in refused.stderr + refused.stdout
    # A listed one, with a new instance: it lands under site-a, dated by its StudyDate.
    ds = pydicom.dcmread(path)
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = pydicom.uid.generate_uid()
    ds.save_as(tmp_path / "new.dcm")
    assert storescu(receiver_port, PUSHER, tmp_path / "new.dcm").returncode == 0
    new = sorted(set(p for p in (landing / "images").rglob("*") if p.is_file()) - set(before))
    assert len(new) == 1 and new[0].relative_to(landing).parts[:3] == ("images", PUSH_SITE, date)
    # An impossible StudyDate: refused with "cannot understand" (0xC000), logged by AE title and reason only.
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = pydicom.uid.generate_uid()
    ds.StudyDate = "20241341"
    ds.save_as(tmp_path / "bad-date.dcm")
    bad = storescu(receiver_port, PUSHER, tmp_path / "bad-date.dcm")
    assert "Received Store Response (Error: CannotUnderstand)" in bad.stdout + bad.stderr
    assert sorted(p for p in (landing / "images").rglob("*") if p.is_file()) == sorted([*before, *new])
    time.sleep(0.5)
    log = receiver["log"].read_text()
    assert f"refused an instance from AE {PUSHER}: missing or invalid StudyDate (status 0xC000)" in log
    assert "rejected an association from AE STRANGER" in log
    assert "20241341" not in log and str(ds.SOPInstanceUID) not in log and str(ds.PatientID) not in log


def test_hostile_values_pushed_to_imaging_receive_never_reach_its_log(uploaded, receiver, receiver_port):
    """pydicom's validation warnings quote the value they find wrong: an instance pushed with a malformed SOP
    Instance UID, a hostile StudyDate and identifiers in its header is refused, and the receiver's log (its
    stdout and stderr) holds its AE title and a fixed reason, never one of those values."""
    import pydicom
    from pynetdicom import AE

    from imaging.deid.quiet import quiet

    marker = "NHS9434765919"
    hostile = {"SOPInstanceUID": f"1.2.826.{marker}", "StudyDate": f"2024{marker}", "PatientID": marker,
               "PatientName": f"Doe^{marker}", "StudyInstanceUID": f"9.{marker}.x"}
    _, (_, path) = sorted(uploaded.items())[0]
    ds = pydicom.dcmread(path)
    with quiet():  # the test's own process: pydicom warns as the values are set and sent
        for keyword, value in hostile.items():
            setattr(ds, keyword, value)
        ds.file_meta.MediaStorageSOPInstanceUID = hostile["SOPInstanceUID"]
    before = receiver["log"].read_text()
    ae = AE(ae_title=PUSHER)
    ae.add_requested_context(ds.SOPClassUID, ds.file_meta.TransferSyntaxUID)
    association = ae.associate(LOOPBACK, receiver_port, ae_title=RECEIVER)
    assert association.is_established
    try:
        with quiet():
            status = association.send_c_store(ds)
    finally:
        association.release()
    assert status is not None and status.Status != 0x0000
    time.sleep(0.5)
    log = receiver["log"].read_text()[len(before):]
    assert f"refused an instance from AE {PUSHER}" in log, log
    assert marker not in log and "Doe^" not in log, log


# --- TLS ------------------------------------------------------------------------------------------------------

def certificates(folder: Path) -> dict[str, Path]:
    """A throwaway CA, a certificate for 127.0.0.1 (the servers') and one for a client, signed by it (openssl)."""
    folder.mkdir(parents=True, exist_ok=True)

    def run(*argv):
        subprocess.run(["openssl", *argv], cwd=folder, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=imaging-test-ca")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}")
        (folder / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")
    return {n: folder / n for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


def test_dimse_over_tls_to_the_pacs_and_to_imaging_receive(uploaded, tmp_path):
    """A PACS that speaks TLS only (Orthanc, client certificates required): the listing and a C-GET over TLS
    with the site's `tls` files, and nothing without them; imaging-receive with `receiver.tls` takes storescu
    over TLS (+tls) and refuses it in the clear."""
    from imaging.pacs.connection import Credentials, DimseAddress, PacsServer, PacsUnavailable, RetryPolicy, Tls
    from imaging.pacs.listing import list_site_day, session
    from imaging.pacs.receive import Receiver, start
    from imaging.pacs.settings import PacsSettings, ReceiverFile

    skip_unless(shutil.which("openssl") is not None, "openssl is not installed")
    cert = certificates(tmp_path / "tls")
    tls = {"DicomTlsEnabled": True, "DicomTlsCertificate": str(cert["server.crt"]),
           "DicomTlsPrivateKey": str(cert["server.key"]), "DicomTlsTrustedCertificates": str(cert["ca.crt"]),
           "DicomTlsRemoteCertificateRequired": True}
    date = DATES[0]
    day = [path for sop, (d, path) in uploaded.items() if d == date]
    with orthanc_server(dicom_modalities={"platform": (CALLING, LOOPBACK, 104)}, dicom_extra=tls) as secure:
        for path in day:
            requests.post(f"{secure.rest}/instances", data=path.read_bytes(), auth=(secure.user, secure.password))
        policy = RetryPolicy(0, 0.01, 10)
        address = DimseAddress(LOOPBACK, secure.dicom_port, secure.aet, CALLING,
                               tls=Tls(str(cert["ca.crt"]), str(cert["client.crt"]), str(cert["client.key"])))
        server = PacsServer(SITE, "", Credentials("none"), 1, "dimse", address)
        client = session(server, policy)
        try:
            listed = list_site_day(client, SITE, date)
            assert len(listed) == len(day)
            first = listed[0]
            data, _ = client.retrieve(first.study_instance_uid, first.series_instance_uid, first.sop_instance_uid,
                                      first.sop_class_uid)
            assert meta(data)[1] == first.sop_instance_uid
        finally:
            client.close()
        clear = PacsServer(SITE, "", Credentials("none"), 1, "dimse",
                           DimseAddress(LOOPBACK, secure.dicom_port, secure.aet, CALLING))
        with pytest.raises(PacsUnavailable):
            list_site_day(session(clear, policy), SITE, date)

    landing = tmp_path / "landing"
    config = ReceiverFile.model_validate({
        "ae_title": RECEIVER, "host": LOOPBACK, "port": free_port(),
        "senders": [{"ae_title": PUSHER, "addresses": ["127.0.0.1"], "site": PUSH_SITE}],
        "tls": {"cert_file": str(cert["server.crt"]), "key_file": str(cert["server.key"]),
                "ca_file": str(cert["ca.crt"])}})
    receiver = Receiver(config, PacsSettings({}, policy, 1, 1), str(landing), str(tmp_path / "spool"))
    served = start(receiver)
    try:
        port = str(served.server_address[1])
        base = ["storescu", "-v", "-aet", PUSHER, "-aec", RECEIVER]
        over_tls = subprocess.run([*base, "+tls", str(cert["client.key"]), str(cert["client.crt"]), "+cf",
                                   str(cert["ca.crt"]), LOOPBACK, port, str(day[0])],
                                  capture_output=True, text=True, timeout=60)
        assert over_tls.returncode == 0, over_tls.stdout + over_tls.stderr
        assert len([p for p in (landing / "images").rglob("*") if p.is_file()]) == 1
        in_clear = subprocess.run([*base, LOOPBACK, port, str(day[1])], capture_output=True, text=True, timeout=60)
        assert in_clear.returncode != 0
        assert len([p for p in (landing / "images").rglob("*") if p.is_file()]) == 1
    finally:
        served.shutdown()


def test_imaging_receive_cuts_unlisted_addresses_and_refuses_an_ae_title_from_another_senders_address(uploaded,
                                                                                                    tmp_path):
    """Loopback is the only address here: a receiver that lists storescu's AE title for 10.0.0.0/8 alone cuts the
    connection; one that lists 127.0.0.1 for another AE title takes the association, but refuses storescu's
    instances (0x0124, not authorised; dcmtk 3.6.7 names it "Unknown Status: 0x124"): an AE title counts only
    from its own addresses."""
    from imaging.pacs.connection import RetryPolicy
    from imaging.pacs.receive import Receiver, start
    from imaging.pacs.settings import PacsSettings, ReceiverFile

    path = sorted(uploaded.values())[0][1]
    for senders, expected in (
            ([{"ae_title": PUSHER, "addresses": ["10.0.0.0/8"], "site": PUSH_SITE}], "Association Request Failed"),
            ([{"ae_title": PUSHER, "addresses": ["10.0.0.0/8"], "site": PUSH_SITE},
              {"ae_title": "OTHER", "addresses": ["127.0.0.1"], "site": PUSH_SITE}], "Status: 0x124")):
        landing = tmp_path / f"landing-{len(senders)}"
        config = ReceiverFile.model_validate({"ae_title": RECEIVER, "host": LOOPBACK, "port": free_port(),
                                              "senders": senders})
        served = start(Receiver(config, PacsSettings({}, RetryPolicy(0, 0, 5), 1, 1), str(landing), str(tmp_path)))
        try:
            sent = storescu(served.server_address[1], PUSHER, path)
        finally:
            served.shutdown()
        assert expected.lower() in (sent.stdout + sent.stderr).lower(), sent.stdout + sent.stderr
        assert not (landing / "images").exists()
