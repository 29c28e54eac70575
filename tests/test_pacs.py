"""The PACS ingest against a real Orthanc with its DICOMweb plugin (Debian's `orthanc`, `orthanc-dicomweb`).

One Orthanc for the module (loopback, a login), a small synthetic hospital uploaded to it; site-b is the PACS
site. The same files Orthanc accepted are also "landed by hand" in a file landing, so the pipeline's outputs
from the two can be compared. Tests build on each other in file order (one module world, one xdist group).
"""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import threading
import time
import urllib.parse
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import requests

from compare import collect, rewritten
from imaging.catalogue import PACS_INSTANCES, PACS_LANDING, RAW_IMAGE_INDEX
from conftest import ROOT
from services import orthanc  # noqa: F401 - the module's Orthanc

SITE = "site-b"
DATES = ("2024-03-01", "2024-03-02")
RANGE = (f"{DATES[0]}|{SITE}", f"{DATES[-1]}|{SITE}")
PAIRS = [(d, SITE) for d in DATES]
PIPELINE = ["raw_image_index", "linked_patient_metadata", "anonymized_images"]
BASE = ROOT / "pacs"
FIRST_VERSIONS: dict[str, str] = {}  # the first fetch's data version per site-day (the tests build on each other)


@pytest.fixture(scope="module")
def credentials(orthanc):
    """The site's credentials in its environment variables, as a deployment gives them."""
    names = {"IMAGING_PACS_SITE_B_USER": orthanc.user, "IMAGING_PACS_SITE_B_PASSWORD": orthanc.password}
    saved = {k: os.environ.get(k) for k in names}
    os.environ.update(names)
    yield names
    for key, value in saved.items():
        os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


@pytest.fixture(scope="module")
def uploaded(orthanc):
    """A small hospital for site-b, uploaded to Orthanc; the files it refused (the generator's broken ones)
    are removed from the hand landing, so both hold the same instances. Returns {sha256: hand path}."""
    from synth import generate_hospital

    hand = BASE / "hand-landing"
    generate_hospital(hand, seed=5, sites=(SITE,), dates=DATES, patients_per_site=3)
    accepted = {}
    with requests.Session() as session:
        session.auth = (orthanc.user, orthanc.password)
        for path in sorted(p for p in (hand / "images").rglob("*") if p.is_file()):
            data = path.read_bytes()
            if session.post(f"{orthanc.rest}/instances", data=data).status_code == 200:
                accepted[hashlib.sha256(data).hexdigest()] = path
            else:
                path.unlink()
    assert len(accepted) >= 6, "too few instances for the tests"
    return accepted


def pacs_defs(defs, warehouse: Path, url: str, max_connections: int = 2):
    """The code location's definitions with this module's landing, warehouse and PACS (site-b) as resources."""
    from dagster import Definitions

    from resources.landing import LandingZone
    from resources.pacs import PacsServers
    from resources.warehouse import Warehouse

    landing = pacs_landing_root()
    root = f"{warehouse}/identifiable/pacs_landing"
    resources = {**defs.resources,
                 "landing": LandingZone(root=str(landing), files_per_task=64, pacs_root=root, pacs_sites=[SITE]),
                 "warehouse": Warehouse(root=str(warehouse)),
                 "pacs": PacsServers(urls={SITE: url}, auth={SITE: "basic"}, max_connections={SITE: max_connections}, retries=1,
                                     backoff_seconds=0.05, timeout_seconds=10, sensor_days=7, landing=root)}
    return Definitions(assets=pacs_assets(defs), asset_checks=defs.asset_checks, resources=resources,
                       executor=defs.executor)


def pacs_assets(defs) -> list:
    """The code location's assets as a deployment with a PACS site has them: pacs_landing, on which raw_image_index
    also depends (without PACS sites, as in this session's environment, neither is so)."""
    from dagster import AssetKey, map_asset_specs

    from assets.pacs_landing import pacs_landing
    from assets.raw_image_index import index_asset
    from definitions import policies

    kept = [a for a in defs.assets if getattr(a, "key", None) not in (AssetKey("raw_image_index"), AssetKey("pacs_landing"))]
    return kept + map_asset_specs(policies, [pacs_landing, index_asset(pacs_sites=True)])


def pacs_landing_root() -> Path:
    """The file landing of the PACS deployment: the clinical extracts only (images come from the PACS)."""
    root = BASE / "pacs-file-landing"
    if not root.exists():
        shutil.copytree(BASE / "hand-landing" / "clinical", root / "clinical")
    return root


def materialize(defs, selection, instance=None):
    """One run over both site-days; the result, whether it succeeded or not."""
    from dagster import AssetSelection, DagsterInstance, define_asset_job

    job = define_asset_job("pacs_test", selection=AssetSelection.assets(*selection))
    resolved = type(defs)(assets=defs.assets, asset_checks=defs.asset_checks, resources=defs.resources, jobs=[job],
                          executor=defs.executor)
    return resolved.resolve_job_def("pacs_test").execute_in_process(
        instance=instance or DagsterInstance.ephemeral(), raise_on_error=False,
        tags={"dagster/asset_partition_range_start": RANGE[0], "dagster/asset_partition_range_end": RANGE[1]})


def failure(result) -> str:
    errors = [e.event_specific_data.error for e in result.all_events if e.is_step_failure]
    assert errors, "the run did not fail"
    error = errors[0]
    text = error.message
    while error.cause is not None:
        error = error.cause
        text += "\n" + error.message
    return text


def outcomes(warehouse: Path) -> list[dict]:
    table = warehouse / PACS_INSTANCES.path
    return pq.read_table(table).to_pylist() if table.exists() else []


def landed(warehouse: Path) -> dict[str, Path]:
    """Every landed file of the PACS landing, by sha256."""
    root = warehouse / PACS_LANDING.path
    return {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in root.rglob("*") if p.is_file()}


def materializations(result) -> dict[str, dict]:
    found = {}
    for event in result.all_events:
        if event.is_step_materialization:
            m = event.step_materialization_data.materialization
            if m.asset_key.to_user_string() == "pacs_landing":
                found[m.partition] = {**{k: v.value for k, v in m.metadata.items()},
                                      "data_version": m.tags.get("dagster/data_version")}
    return found


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("failure, per_instance, raised, attempts", [
    (401, True, "PacsAuthError", 1), (403, False, "PacsAuthError", 1),       # a wrong password: at once
    (404, True, "InstanceFailed", 1), (404, False, "PacsUnavailable", 1),    # the instance's own, or the listing's
    (500, True, "InstanceFailed", 3), (503, True, "PacsUnavailable", 3),     # retried, then the instance or the server
    ("reset", True, "PacsUnavailable", 3), ("cut", True, "PacsUnavailable", 3),
])
def test_the_retry_policy_tells_transient_from_permanent(failure, per_instance, raised, attempts):
    from imaging.pacs.connection import RetryPolicy
    from imaging.pacs.dicomweb import http_failure

    calls = []

    def request():
        calls.append(1)
        if failure == "reset":
            raise requests.ConnectionError("reset")
        if failure == "cut":
            raise requests.exceptions.ChunkedEncodingError("cut")
        response = requests.Response()
        response.status_code = failure
        raise requests.HTTPError(response=response)

    with pytest.raises(Exception) as error:
        RetryPolicy(retries=2, backoff_seconds=0.001, timeout_seconds=1).call("site-b", request, per_instance=per_instance,
                                                                            classify=http_failure)
    assert type(error.value).__name__ == raised and len(calls) == attempts
    assert "http" not in str(error.value).lower().replace("http ", "")  # a status, never a URL


def test_configuration_keeps_credentials_out_of_urls_and_reprs():
    from imaging.driver.platform_files import load_file
    from imaging.pacs.connection import credentials_from_env
    from imaging.pacs.dicomweb import marker
    from imaging.pacs.settings import load_pacs

    env = {"IMAGING_PACS_SITE_B_URL": "http://127.0.0.1:9/dicom-web", "IMAGING_PACS_SITE_B_TOKEN": "tok-secret"}
    settings = load_pacs(load_file("pacs.yaml"), ["site-a", "site-b"], env)
    assert list(settings.endpoints) == ["site-b"]
    server = settings.server("site-b", env)
    assert server.credentials.auth == "token" and "tok-secret" not in repr(server) + repr(settings)
    for url in ("http://user:pw@127.0.0.1:9/dicom-web", "http://127.0.0.1:9/dicom-web?token=x", "ftp://pacs/x"):
        with pytest.raises(ValueError):
            load_pacs(load_file("pacs.yaml"), ["site-b"], {"IMAGING_PACS_SITE_B_URL": url})
    with pytest.raises(Exception, match="IMAGING_PACS_SITE_B_USER"):  # basic auth asked, no user: named, not shown
        credentials_from_env("site-b", "basic", {})
    # The change marker ignores where the instance is served from (a moved server changes nothing).
    record = {"00080018": {"vr": "UI", "Value": ["1.2.3"]}, "00081190": {"vr": "UR", "Value": ["http://a/x"]}}
    moved = {**record, "00081190": {"vr": "UR", "Value": ["http://b/y"]}}
    assert marker(record) == marker(moved) != marker({**record, "00200013": {"vr": "IS", "Value": [2]}})



def test_retrieved_files_are_byte_identical_to_the_uploaded_ones(defs, orthanc, credentials, uploaded):
    warehouse = BASE / "warehouse"
    result = materialize(pacs_defs(defs, warehouse, orthanc.dicomweb), ["pacs_landing"])
    assert result.success
    files = landed(warehouse)
    assert set(files) == set(uploaded)  # sha256 of every landed file = sha256 of an uploaded one, and all landed
    for sha, path in files.items():  # in the landing layout, each under its own site-day
        assert path.relative_to(warehouse / PACS_LANDING.path).parts[:3] == \
            ("images", SITE, uploaded[sha].relative_to(BASE / "hand-landing" / "images" / SITE).parts[0])
    rows = outcomes(warehouse)
    assert {r["outcome"] for r in rows} == {"fetched"} and len(rows) == len(uploaded)
    facts = materializations(result)
    assert sorted(facts) == sorted(f"{d}|{SITE}" for d in DATES)
    FIRST_VERSIONS.update({p: f["data_version"] for p, f in facts.items()})
    for fact in facts.values():  # per site-day: listed = fetched + unchanged + failed
        assert fact["listed"] == fact["fetched"] + fact["unchanged"] + fact["failed"] > 0
        assert fact["failed"] == 0 and fact["pacs_site"] is True
    # Nothing identifying in the metadata: no UID, user or password, only counts, a digest and a relative path.
    shown = repr(facts)
    assert orthanc.password not in shown and orthanc.user not in shown
    assert not any(r["sop_instance_uid"] in shown for r in rows)


def test_a_rerun_keeps_what_is_unchanged_and_has_the_same_data_versions(defs, orthanc, credentials, uploaded):
    warehouse = BASE / "warehouse"
    before = {sha: p.stat().st_ino for sha, p in landed(warehouse).items()}
    first = {r["sop_instance_uid"]: r["sha256"] for r in outcomes(warehouse)}
    result = materialize(pacs_defs(defs, warehouse, orthanc.dicomweb), ["pacs_landing"])
    assert result.success
    rows = outcomes(warehouse)
    assert {r["outcome"] for r in rows} == {"unchanged"}
    assert {r["sop_instance_uid"]: r["sha256"] for r in rows} == first
    assert {sha: p.stat().st_ino for sha, p in landed(warehouse).items()} == before  # kept, not fetched again
    versions = {p: f["data_version"] for p, f in materializations(result).items()}
    # The same listing, the same versions: raw_image_index of these site-days stays up to date.
    assert versions == FIRST_VERSIONS and len(set(versions.values())) == 2


def test_pipeline_outputs_equal_those_of_the_same_files_landed_by_hand(defs, orthanc, credentials, uploaded):
    from dagster import AssetKey, DagsterInstance

    warehouse, hand = BASE / "warehouse", BASE / "hand-warehouse"
    with DagsterInstance.ephemeral() as instance:  # as deployed: the PACS site-day pipeline, one instance
        landing = materialize(pacs_defs(defs, warehouse, orthanc.dicomweb), ["pacs_landing"], instance)
        assert materialize(pacs_defs(defs, warehouse, orthanc.dicomweb), PIPELINE, instance).success
        # Each site-day of the index was made from its own PACS listing's version (its lineage names it).
        for partition, fact in materializations(landing).items():
            record = instance.get_latest_data_version_record(AssetKey("raw_image_index"), False, partition)
            tags = record.asset_materialization.tags
            assert tags["dagster/input_data_version/pacs_landing"] == fact["data_version"] == FIRST_VERSIONS[partition]
    assert materialize(hand_defs(defs, hand), PIPELINE).success
    # The identifiable tables name each source file: map each PACS-landed file to the hand-landed one.
    rewrite = {str(path): str(uploaded[sha]) for sha, path in landed(warehouse).items()}
    got = {k: rewritten(v, rewrite) for k, v in collect(str(warehouse), PAIRS).items() if "pacs_" not in k}
    want = collect(str(hand), PAIRS)
    assert sorted(got) == sorted(want)
    assert any("anonymized_images/files" in k for k in got) and any(k.startswith(RAW_IMAGE_INDEX.path) for k in got)
    assert [k for k in got if got[k] != want[k]] == []


def test_a_rerun_fetches_exactly_what_changed_in_the_pacs_or_on_disk(defs, orthanc, credentials, uploaded, tmp_path):
    import pydicom

    warehouse = BASE / "warehouse"
    (first_sha, first), (second_sha, second) = sorted(uploaded.items())[:2]
    # In the PACS: one instance replaced under the same UIDs with another InstanceNumber (a listed attribute).
    ds = pydicom.dcmread(first)
    ds.InstanceNumber = int(ds.get("InstanceNumber") or 0) + 100
    ds.save_as(tmp_path / "changed.dcm")
    changed = (tmp_path / "changed.dcm").read_bytes()
    auth = (orthanc.user, orthanc.password)
    requests.post(f"{orthanc.rest}/instances", data=changed, auth=auth).raise_for_status()
    # On disk: another instance's landed copy damaged (the listing does not change).
    damaged = landed(warehouse)[second_sha]
    damaged.write_bytes(damaged.read_bytes()[:-10] + b"0123456789")
    try:
        result = materialize(pacs_defs(defs, warehouse, orthanc.dicomweb), ["pacs_landing"])
    finally:
        requests.post(f"{orthanc.rest}/instances", data=first.read_bytes(), auth=auth).raise_for_status()
    assert result.success
    by_sop = {r["sop_instance_uid"]: r for r in outcomes(warehouse)}
    assert sorted(r["outcome"] for r in by_sop.values()) == ["fetched"] * 2 + ["unchanged"] * (len(uploaded) - 2)
    assert by_sop[sop_of(first)]["outcome"] == by_sop[sop_of(second)]["outcome"] == "fetched"
    assert by_sop[sop_of(first)]["sha256"] == hashlib.sha256(changed).hexdigest()
    assert set(landed(warehouse)) == set(uploaded) - {first_sha} | {hashlib.sha256(changed).hexdigest()}
    day = first.relative_to(BASE / "hand-landing" / "images" / SITE).parts[0]
    versions = {p: f["data_version"] for p, f in materializations(result).items()}
    assert versions[f"{day}|{SITE}"] != FIRST_VERSIONS[f"{day}|{SITE}"]  # the PACS changed that site-day
    # And back: the original in the PACS again, fetched again; the site-day's version is the first one again.
    again = materialize(pacs_defs(defs, warehouse, orthanc.dicomweb), ["pacs_landing"])
    assert set(landed(warehouse)) == set(uploaded)
    assert {p: f["data_version"] for p, f in materializations(again).items()} == FIRST_VERSIONS


def hand_defs(defs, warehouse: Path):
    """The same definitions on the hand landing: no PACS site."""
    from dagster import Definitions

    from resources.landing import LandingZone
    from resources.warehouse import Warehouse

    resources = {**defs.resources, "landing": LandingZone(root=str(BASE / "hand-landing"), files_per_task=64),
                 "warehouse": Warehouse(root=str(warehouse))}
    return Definitions(assets=defs.assets, asset_checks=defs.asset_checks, resources=resources, executor=defs.executor)


def test_a_wrong_password_is_a_clear_error_and_lands_nothing(defs, orthanc, credentials, uploaded):
    warehouse = BASE / "warehouse-wrong-password"
    os.environ["IMAGING_PACS_SITE_B_PASSWORD"] = "not-the-password"
    try:
        result = materialize(pacs_defs(defs, warehouse, orthanc.dicomweb), ["pacs_landing"])
    finally:
        os.environ["IMAGING_PACS_SITE_B_PASSWORD"] = orthanc.password
    assert not result.success
    message = failure(result)
    assert "PACS of site site-b refused the credentials (HTTP 401)" in message
    assert "not-the-password" not in message and orthanc.password not in message
    assert landed(warehouse) == {} and outcomes(warehouse) == []
    assert not list(warehouse.rglob("*.dcm"))  # nothing staged either


def sop_of(path: Path) -> str:
    import pydicom

    return str(pydicom.dcmread(path, stop_before_pixels=True).SOPInstanceUID)


def delete_instance(orthanc, sop: str) -> None:
    """Remove one instance from Orthanc (its REST API: look the UID up, delete what it names)."""
    auth = (orthanc.user, orthanc.password)
    found = requests.post(f"{orthanc.rest}/tools/lookup", data=sop, auth=auth).json()
    (instance,) = [f["ID"] for f in found if f["Type"] == "Instance"]
    requests.delete(f"{orthanc.rest}/instances/{instance}", auth=auth).raise_for_status()


def test_an_instance_that_keeps_failing_is_recorded_with_its_reason_and_the_counts_add_up(
        defs, orthanc, credentials, uploaded, monkeypatch):
    from imaging.pacs import listing as pacs_listing

    warehouse = BASE / "warehouse-failing"
    sha, path = sorted(uploaded.items())[0]
    # Listed, then gone from the server before its retrieval: WADO-RS answers 404 for it.
    monkeypatch.setattr(pacs_listing, "on_listed", lambda site_days, instances: delete_instance(orthanc, sop_of(path)))
    result = materialize(pacs_defs(defs, warehouse, orthanc.dicomweb), ["pacs_landing"])
    assert result.success  # one instance's failure never fails the site-day
    rows = outcomes(warehouse)
    failed = [r for r in rows if r["outcome"] == "failed"]
    assert [(r["sop_instance_uid"], r["reason"], r["sha256"]) for r in failed] == [
        (sop_of(path), "HTTP 404 from the server", None)]
    assert set(landed(warehouse)) == set(uploaded) - {sha}  # the rest of the site-days landed
    facts = materializations(result)
    assert sum(f["failed"] for f in facts.values()) == 1
    for fact in facts.values():
        assert fact["listed"] == fact["fetched"] + fact["unchanged"] + fact["failed"]
    assert [f["failed/HTTP 404 from the server"] for f in facts.values() if f["failed"]] == [1]
    # Back on the server: the next run fetches it, keeps the rest, and the site-day's version moves.
    monkeypatch.undo()
    requests.post(f"{orthanc.rest}/instances", data=path.read_bytes(), auth=(orthanc.user, orthanc.password))
    again = materialize(pacs_defs(defs, warehouse, orthanc.dicomweb), ["pacs_landing"])
    assert set(landed(warehouse)) == set(uploaded)
    assert sorted(r["outcome"] for r in outcomes(warehouse)) == ["fetched"] + ["unchanged"] * (len(uploaded) - 1)
    day = next(p for p, f in facts.items() if f["failed"])
    assert materializations(again)[day]["data_version"] != facts[day]["data_version"]


def test_the_sensor_requests_exactly_the_new_or_changed_site_days(defs, orthanc, credentials, uploaded):
    from dagster import DagsterInstance, build_sensor_context

    from automation.pacs_sensor import pacs_sensor
    from resources.pacs import PacsServers

    pacs = PacsServers(urls={SITE: orthanc.dicomweb}, auth={SITE: "basic"}, max_connections={SITE: 2}, retries=1,
                       backoff_seconds=0.05, timeout_seconds=10, sensor_days=2000, landing="unused")
    with DagsterInstance.ephemeral() as instance:
        first = pacs_sensor(build_sensor_context(instance=instance, resources={"pacs": pacs}))
        keys = sorted(r.run_key for r in first.run_requests)
        assert [k.split("@")[0] for k in keys] == [f"{d}|{SITE}" for d in DATES]
        assert all(r.job_name in (None, "pacs_site_day_pipeline") for r in first.run_requests)
        again = pacs_sensor(build_sensor_context(instance=instance, resources={"pacs": pacs}, cursor=first.cursor))
        assert again.run_requests == []
        # One study's instance gone from the PACS: that site-day alone is requested, under a new run key.
        sha, path = sorted(uploaded.items())[-1]
        delete_instance(orthanc, sop_of(path))
        try:
            changed = pacs_sensor(build_sensor_context(instance=instance, resources={"pacs": pacs}, cursor=first.cursor))
        finally:
            requests.post(f"{orthanc.rest}/instances", data=path.read_bytes(), auth=(orthanc.user, orthanc.password))
        day = uploaded[sha].relative_to(BASE / "hand-landing" / "images" / SITE).parts[0]
        assert [r.run_key.split("@")[0] for r in changed.run_requests] == [f"{day}|{SITE}"]
        assert changed.run_requests[0].run_key not in keys
        assert orthanc.password not in repr(first) + repr(changed)


class Proxy(http.server.ThreadingHTTPServer):
    """A loopback HTTP proxy before Orthanc that counts the retrievals in flight (their maximum at once) and, when
    `stop_after` is set, kills Orthanc (SIGKILL) once that many retrievals have passed: a server that stops in
    the middle of a transfer."""

    def __init__(self, orthanc, stop_after: int | None = None, token: str | None = None):
        # `token`: the proxy asks for this bearer token (a gateway in front of a PACS) and logs in to Orthanc itself.
        self.orthanc, self.stop_after, self.token, self.lock = orthanc, stop_after, token, threading.Lock()
        self.retrievals = self.in_flight = self.most_at_once = 0
        super().__init__(("127.0.0.1", 0), _Forward)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/dicom-web"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's session expects of a server

    def do_GET(self):  # noqa: N802 - the handler's protocol
        proxy: Proxy = self.server
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        if proxy.token is not None:
            if self.headers.get("Authorization") != f"Bearer {proxy.token}":
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            headers.pop("Authorization")
        retrieval = "/instances/" in self.path and "application/dicom" in self.headers.get("Accept", "")
        with proxy.lock:
            if retrieval:
                proxy.retrievals += 1
                proxy.in_flight += 1
                proxy.most_at_once = max(proxy.most_at_once, proxy.in_flight)
                if proxy.retrievals == (proxy.stop_after or 0) + 1 and proxy.stop_after is not None:
                    proxy.orthanc.kill()
        try:
            upstream = requests.get(urllib.parse.urljoin(proxy.orthanc.rest, self.path), timeout=10, headers=headers,
                                    auth=(proxy.orthanc.user, proxy.orthanc.password) if proxy.token else None)
        except requests.ConnectionError:
            upstream = None
        finally:
            if retrieval:
                time.sleep(0.02)  # a retrieval that takes a moment, so overlapping ones overlap here too
                with proxy.lock:
                    proxy.in_flight -= 1
        if upstream is None:
            self.send_error(502)
            return
        self.send_response(upstream.status_code)
        for key, value in upstream.headers.items():
            if key.lower() not in ("transfer-encoding", "connection", "content-length", "content-encoding"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(upstream.content)))
        self.end_headers()
        self.wfile.write(upstream.content)

    def log_message(self, *args):  # quiet
        pass


def test_retrievals_at_once_per_server_are_capped_by_configuration(defs, orthanc, credentials, uploaded, monkeypatch):
    import assets.pacs_landing as asset_module

    monkeypatch.setattr(asset_module, "INSTANCES_PER_TASK", 1)  # uncapped: a task per instance
    proxy = Proxy(orthanc)
    try:
        result = materialize(pacs_defs(defs, BASE / "warehouse-capped", proxy.url, max_connections=2), ["pacs_landing"])
    finally:
        proxy.close()
    assert result.success and proxy.retrievals == len(uploaded) > 2
    assert {f["run/retrieval_tasks"] for f in materializations(result).values()} == {2}  # not one per instance
    assert 1 <= proxy.most_at_once <= 2  # what the server saw at once


def test_a_bearer_token_from_the_environment_reaches_the_server_and_a_wrong_one_is_refused(defs, orthanc, uploaded):
    from dagster import Definitions

    from resources.pacs import PacsServers

    proxy = Proxy(orthanc, token="the-right-token")
    saved = {k: os.environ.get(k) for k in ("IMAGING_PACS_SITE_B_TOKEN", "IMAGING_PACS_SITE_B_USER")}
    os.environ.pop("IMAGING_PACS_SITE_B_USER", None)
    try:
        results = {}
        for token in ("a-wrong-token", "the-right-token"):
            os.environ["IMAGING_PACS_SITE_B_TOKEN"] = token
            base = pacs_defs(defs, BASE / f"warehouse-{token}", proxy.url)
            resources = {**base.resources, "pacs": PacsServers(
                urls={SITE: proxy.url}, auth={SITE: "token"}, max_connections={SITE: 2}, retries=1, backoff_seconds=0.05,
                timeout_seconds=10, sensor_days=7, landing=f"{BASE}/warehouse-{token}/{PACS_LANDING.path}")}
            results[token] = materialize(Definitions(assets=base.assets, asset_checks=base.asset_checks,
                                                     resources=resources, executor=base.executor), ["pacs_landing"])
    finally:
        proxy.close()
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    assert "refused the credentials (HTTP 401)" in failure(results["a-wrong-token"])
    assert "a-wrong-token" not in failure(results["a-wrong-token"])
    assert results["the-right-token"].success
    assert set(landed(BASE / "warehouse-the-right-token")) == set(uploaded)


def test_a_server_stopped_mid_transfer_leaves_nothing_and_the_next_run_recovers(defs, orthanc, credentials, uploaded):
    warehouse = BASE / "warehouse-stopped"
    proxy = Proxy(orthanc, stop_after=2)
    try:
        result = materialize(pacs_defs(defs, warehouse, proxy.url), ["pacs_landing"])
    finally:
        proxy.close()
    assert proxy.retrievals > 2  # it did stop in the middle: some retrievals had passed
    assert not result.success
    assert "PACS of site site-b unavailable" in failure(result)
    assert landed(warehouse) == {} and outcomes(warehouse) == []  # nothing committed for either site-day
    orthanc.restart()
    again = materialize(pacs_defs(defs, warehouse, orthanc.dicomweb), ["pacs_landing"])
    assert again.success
    assert set(landed(warehouse)) == set(uploaded)
    rows = outcomes(warehouse)
    assert len(rows) == len(uploaded) and {r["outcome"] for r in rows} == {"fetched"}
    assert not (warehouse / "identifiable" / "_staging").exists() or not any((warehouse / "identifiable" / "_staging").iterdir())


def test_a_published_approved_release_goes_to_a_research_pacs_by_stow_rs_byte_for_byte(orthanc, tmp_path_factory):
    """STOW-RS of a small release (built, held, approved by two signers and published without Spark, as the
    signed-approval tests do) to Orthanc as the research PACS; a release not yet approved is refused."""
    import pydicom

    from approvers import approve_all
    from imaging.governance import approval as gate
    from imaging.governance.stow import StowRefused, release_images, stow
    from imaging.pacs.connection import Credentials, PacsServer, RetryPolicy
    from release_helpers import SMALL_TEST, make_hospital
    from test_signed_approvals import World, hold, materialize as publish

    hospital = make_hospital(tmp_path_factory.mktemp("stow"))
    world = World(hospital, str(hospital.warehouse))
    research = PacsServer("research", orthanc.dicomweb, Credentials("basic", orthanc.user, orthanc.password))
    policy = RetryPolicy(1, 0.05, 10)
    auth = (orthanc.user, orthanc.password)
    count = lambda: requests.get(f"{orthanc.rest}/statistics", auth=auth).json()["CountInstances"]  # noqa: E731

    held = hold(world)
    before = count()
    with pytest.raises(StowRefused, match="held, AWAITING APPROVAL"):
        stow(held, research, policy, warehouse=world.warehouse)
    assert count() == before  # nothing sent
    approve_all(held)
    assert publish(world).action == gate.PUBLISH
    release = gate.published_path(world.warehouse, SMALL_TEST.name, 1)
    done = stow(release, research, policy, warehouse=world.warehouse, batch=3)
    images = release_images(release)
    assert (done.sent, done.stored, done.failed) == (len(images), len(images), 0) and images
    assert count() == before + len(images)
    from imaging.pacs.dicomweb import connect, retrieve_stored

    client = connect(research, policy)
    for path in images:  # the research PACS returns exactly the approved bytes
        ds = pydicom.dcmread(path, stop_before_pixels=True)
        data = retrieve_stored(client, ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.SOPInstanceUID)
        assert hashlib.sha256(data).hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
