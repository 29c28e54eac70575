"""The UI behind the example authenticating proxy (platform/proxy/): real nginx, real Dagster webserver.

nginx runs in the foreground from a temporary prefix on a free loopback port, with the project's
server block rendered from its template, a self-signed certificate and a password file; the
webserver is the UI tests' `dagster dev` on another loopback port (tests/conftest.py, fixture
`dagster_ui`), and a reviewer's login goes to a second, `--read-only` webserver on the same instance.
Without credentials nothing is served; with them the UI page, GraphQL and the websocket upgrade the
UI's live updates use all come through; a reviewer may read but every launch is refused with a message
a person understands, while the operator may act; the runs' review reports are served behind the login.
"""

from __future__ import annotations

import base64
import http.client
import os
import ssl
from pathlib import Path

import pytest

from proxy import NGINX, OPENSSL, PASSWORD, REVIEWER, REVIEWER_PASSWORD, USER, nginx_in_front
from ui_mutations import REFUSED, answer, mutations, refused

pytestmark = pytest.mark.skipif(not (NGINX and OPENSSL), reason="needs nginx and openssl (Debian: nginx, openssl)")


def _request(port: int, method: str, path: str, *, auth: tuple[str, str] | None, body: bytes | None = None,
             headers: dict | None = None, cafile: Path) -> tuple[int, dict, bytes]:
    context = ssl.create_default_context(cafile=str(cafile))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=60)
    headers = dict(headers or {})
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        # A 101 has no body to read: the connection now belongs to the websocket.
        data = b"" if response.status == 101 else response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        connection.close()


@pytest.fixture(scope="module")
def proxied_ui(dagster_ui, tmp_path_factory):
    with nginx_in_front(dagster_ui.get().url, tmp_path_factory.mktemp("proxy"), dagster_ui.reviewer().url,
                        dagster_ui.reviews) as (port, cafile):
        yield port, cafile, dagster_ui.reviews


GRAPHQL = b'{"query": "{ version assetNodes { assetKey { path } } }"}'


def test_without_credentials_nothing_is_served(proxied_ui):
    port, cafile, _ = proxied_ui
    for method, path, body in (("GET", "/", None), ("GET", "/assets", None), ("POST", "/graphql", GRAPHQL)):
        status, headers, data = _request(port, method, path, auth=None, body=body, cafile=cafile,
                                         headers={"Content-Type": "application/json"})
        assert status == 401, (method, path, status)
        assert headers["www-authenticate"].startswith("Basic")
        assert b"assetNodes" not in data and b"raw_image_index" not in data
    status, _, _ = _request(port, "GET", "/", auth=(USER, "wrong password"), cafile=cafile)
    assert status == 401


def test_with_credentials_the_ui_and_graphql_are_served(proxied_ui):
    import dagster

    port, cafile, _ = proxied_ui
    status, headers, page = _request(port, "GET", "/", auth=(USER, PASSWORD), cafile=cafile)
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b"Dagster" in page
    assert headers["x-frame-options"] == "DENY"
    status, _, answer = _request(port, "POST", "/graphql", auth=(USER, PASSWORD), body=GRAPHQL, cafile=cafile,
                                 headers={"Content-Type": "application/json"})
    assert status == 200
    import json

    data = json.loads(answer)["data"]
    assert data["version"] == dagster.__version__
    assert {"/".join(n["assetKey"]["path"]) for n in data["assetNodes"]} >= {
        "raw_image_index", "linked_patient_metadata", "anonymized_images", "published_cohort"}


def test_the_websocket_upgrade_needs_credentials_and_passes_with_them(proxied_ui):
    port, cafile, _ = proxied_ui
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
               "Sec-WebSocket-Protocol": "graphql-ws"}
    status, _, _ = _request(port, "GET", "/graphql", auth=None, headers=upgrade, cafile=cafile)
    assert status == 401
    status, headers, _ = _request(port, "GET", "/graphql", auth=(USER, PASSWORD), headers=upgrade, cafile=cafile)
    assert status == 101, "the UI's GraphQL subscriptions reach the webserver through the proxy"
    assert headers["upgrade"].lower() == "websocket"


def _graphql(port, cafile, login, query: str, variables: dict | None = None) -> dict:
    import json

    status, _, answer_ = _request(port, "POST", "/graphql", auth=login, cafile=cafile,
                                  body=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                  headers={"Content-Type": "application/json"})
    assert status == 200, (status, answer_[:300])
    return json.loads(answer_)


def test_a_reviewer_reads_but_every_launch_is_refused_with_a_message_and_the_operator_may_act(proxied_ui):
    port, cafile, _ = proxied_ui
    reviewer, operator = (REVIEWER, REVIEWER_PASSWORD), (USER, PASSWORD)
    assert _graphql(port, cafile, reviewer, "{ assetNodes { assetKey { path } } }")["data"]["assetNodes"]
    allowed = {login: {p["permission"]: p for p in _graphql(port, cafile, login, "{ permissions { permission value "
                                                                                 "disabledReason } }")["data"]["permissions"]}
               for login in (reviewer, operator)}
    assert not any(p["value"] for p in allowed[reviewer].values())  # every permission off: read only
    assert allowed[reviewer]["launch_partition_backfill"]["disabledReason"].startswith("Read-only login (a reviewer)")
    for permission in ("launch_pipeline_execution", "launch_partition_backfill", "edit_sensor", "start_schedule",
                       "wipe_assets", "terminate_pipeline_execution", "sensor_dry_run"):
        assert allowed[operator][permission]["value"], permission
    for what, (document, variables) in mutations("amd-oct", "2024-03-01|site-a").items():
        result = answer(_graphql(port, cafile, reviewer, document, variables)["data"])
        assert refused(result) and result["message"].startswith(REFUSED), (what, result)
    # The operator's login reaches the webserver that may act: a sensor's Preview runs (with an empty cursor).
    document, variables = mutations("amd-oct", "2024-03-01|site-a")["preview a sensor"]
    preview = answer(_graphql(port, cafile, operator, document.replace("landing_sensor", "notify_failed_checks"),
                              {"s": {**variables["s"], "sensorName": "notify_failed_checks"}})["data"])
    assert preview["__typename"] == "DryRunInstigationTick", preview


def test_the_runs_review_reports_are_served_behind_the_login_and_nothing_else(proxied_ui):
    port, cafile, reviews = proxied_ui
    reviews.mkdir(parents=True, exist_ok=True)
    name = "proxy-test-" + "ab" * 32 + ".html"
    (reviews / name).write_text("<!DOCTYPE html><title>Release review</title><h1>VERIFIED</h1>")
    (reviews / "notes.txt").write_text("not a review")
    try:
        assert _request(port, "GET", f"/reviews/{name}", auth=None, cafile=cafile)[0] == 401
        for login in ((REVIEWER, REVIEWER_PASSWORD), (USER, PASSWORD)):
            status, headers, page = _request(port, "GET", f"/reviews/{name}", auth=login, cafile=cafile)
            assert status == 200 and b"<h1>VERIFIED</h1>" in page and headers["content-type"].startswith("text/html")
            assert "default-src 'none'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
        for other in ("/reviews/notes.txt", "/reviews/", f"/reviews/x/{name}"):
            assert _request(port, "GET", other, auth=(REVIEWER, REVIEWER_PASSWORD), cafile=cafile)[0] == 404, other
        # A path that climbs out is normalised by nginx before any location: it is the UI's page, not the folder.
        status, _, page = _request(port, "GET", "/reviews/..%2fnotes.txt", auth=(REVIEWER, REVIEWER_PASSWORD),
                                   cafile=cafile)
        assert b"not a review" not in page
    finally:
        (reviews / name).unlink()
        (reviews / "notes.txt").unlink()
