"""The UI behind the example authenticating proxy (platform/proxy/): real nginx, real Dagster webserver.

nginx runs in the foreground from a temporary prefix on a free loopback port, with the project's
server block rendered from its template, a self-signed certificate and a password file; the
webserver is the UI tests' `dagster dev` on another loopback port (tests/conftest.py, fixture
`dagster_ui`). Without credentials nothing is served; with them the UI page, GraphQL and the
websocket upgrade the UI's live updates use all come through.
"""

from __future__ import annotations

import base64
import http.client
import os
import ssl
from pathlib import Path

import pytest

from proxy import NGINX, OPENSSL, PASSWORD, USER, nginx_in_front

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
    with nginx_in_front(dagster_ui.get().url, tmp_path_factory.mktemp("proxy")) as (port, cafile):
        yield port, cafile


GRAPHQL = b'{"query": "{ version assetNodes { assetKey { path } } }"}'


def test_without_credentials_nothing_is_served(proxied_ui):
    port, cafile = proxied_ui
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

    port, cafile = proxied_ui
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
    port, cafile = proxied_ui
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
               "Sec-WebSocket-Protocol": "graphql-ws"}
    status, _, _ = _request(port, "GET", "/graphql", auth=None, headers=upgrade, cafile=cafile)
    assert status == 401
    status, headers, _ = _request(port, "GET", "/graphql", auth=(USER, PASSWORD), headers=upgrade, cafile=cafile)
    assert status == 101, "the UI's GraphQL subscriptions reach the webserver through the proxy"
    assert headers["upgrade"].lower() == "websocket"
