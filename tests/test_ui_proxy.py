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
import shutil
import signal
import ssl
import string
import subprocess
import time
from pathlib import Path

import pytest

from dagster_server import REPO, free_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
OPENSSL = shutil.which("openssl")
pytestmark = pytest.mark.skipif(not (NGINX and OPENSSL), reason="needs nginx and openssl (Debian: nginx, openssl)")

USER, PASSWORD = "operator", "correct horse battery staple"


def _render(tmp: Path, listen: int, upstream: str) -> Path:
    """The project's template, rendered as envsubst would, inside a minimal throwaway main config."""
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp / "ui.key"), "-out",
                    str(tmp / "ui.crt")], check=True, capture_output=True)
    digest = subprocess.run([OPENSSL, "passwd", "-6", "-stdin"], input=PASSWORD, check=True, capture_output=True,
                            text=True).stdout.strip()
    (tmp / "htpasswd").write_text(f"{USER}:{digest}\n")
    template = string.Template((REPO / "platform/proxy/dagster-ui.conf.template").read_text())
    server = template.safe_substitute(UI_LISTEN=f"127.0.0.1:{listen}", UI_SERVER_NAME="localhost",
                                      DAGSTER_UPSTREAM=upstream, TLS_CERT=str(tmp / "ui.crt"),
                                      TLS_KEY=str(tmp / "ui.key"), HTPASSWD_FILE=str(tmp / "htpasswd"))
    assert "${" not in server, "every placeholder of the template is documented and rendered"
    (tmp / "dagster-ui.conf").write_text(server)
    temp_paths = "\n".join(f"  {kind}_temp_path {tmp}/{kind};" for kind in
                           ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    # As root, nginx's workers would drop to an unprivileged user that cannot read the temp dir.
    user = "user root;" if os.geteuid() == 0 else ""
    (tmp / "nginx.conf").write_text(f"""{user}
daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 64; }}
http {{
  access_log {tmp}/access.log;
{temp_paths}
  include {tmp}/dagster-ui.conf;
}}
""")
    return tmp / "nginx.conf"


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
    tmp = tmp_path_factory.mktemp("proxy")
    server = dagster_ui.get()
    port = free_port()
    conf = _render(tmp, port, server.url.removeprefix("http://"))
    check = subprocess.run([NGINX, "-t", "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    nginx = subprocess.Popen([NGINX, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert nginx.poll() is None, nginx.stderr.read().decode()
            try:
                _request(port, "GET", "/", auth=None, cafile=tmp / "ui.crt")
                break
            except OSError:
                time.sleep(0.3)
        yield port, tmp / "ui.crt"
    finally:
        nginx.send_signal(signal.SIGQUIT)  # graceful stop of the master and its worker
        try:
            nginx.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(nginx.pid, signal.SIGKILL)
            nginx.wait(5)


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
