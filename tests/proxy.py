"""The example authenticating proxy (platform/proxy/) in front of a test's Dagster webservers: a throwaway nginx.

Not a test module: the proxy test and the browser tests (a reviewer and an operator who come in through the proxy)
use it. nginx runs in the foreground from a temporary prefix on a free loopback port, with the project's server
block rendered from its template (as `envsubst` would), a self-signed certificate, a password file with two
logins (an operator, listed in the operators file, and a reviewer, who is not) and the reviews folder served.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import string
import subprocess
import time
from pathlib import Path

from dagster_server import REPO, free_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
OPENSSL = shutil.which("openssl")
USER, PASSWORD = "operator", "correct horse battery staple"
REVIEWER, REVIEWER_PASSWORD = "reviewer", "tr0ub4dor and three"


def render(tmp: Path, listen: int, upstream: str, readonly: str, reviews: Path) -> Path:
    """The project's template, rendered as envsubst would, inside a minimal throwaway main config."""
    subprocess.run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp / "ui.key"), "-out",
                    str(tmp / "ui.crt")], check=True, capture_output=True)
    lines = []
    for user, password in ((USER, PASSWORD), (REVIEWER, REVIEWER_PASSWORD)):
        digest = subprocess.run([OPENSSL, "passwd", "-6", "-stdin"], input=password, check=True, capture_output=True,
                                text=True).stdout.strip()
        lines.append(f"{user}:{digest}\n")
    (tmp / "htpasswd").write_text("".join(lines))
    (tmp / "operators").write_text(f"{USER} operator;\n")
    template = string.Template((REPO / "platform/proxy/dagster-ui.conf.template").read_text())
    server = template.safe_substitute(UI_LISTEN=f"127.0.0.1:{listen}", UI_SERVER_NAME="localhost",
                                      DAGSTER_UPSTREAM=upstream, DAGSTER_READONLY_UPSTREAM=readonly,
                                      TLS_CERT=str(tmp / "ui.crt"), TLS_KEY=str(tmp / "ui.key"),
                                      HTPASSWD_FILE=str(tmp / "htpasswd"), OPERATORS_FILE=str(tmp / "operators"),
                                      REVIEWS_DIR=str(reviews))
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



@contextlib.contextmanager
def nginx_in_front(upstream_url: str, tmp: Path, readonly_url: str, reviews: Path):
    """nginx with the project's server block: operators to `upstream_url`, reviewers to `readonly_url` (a read-only
    webserver), /reviews/ from `reviews`; yields (port, certificate)."""
    import http.client
    import ssl

    port = free_port()
    conf = render(tmp, port, upstream_url.removeprefix("http://"), readonly_url.removeprefix("http://"), reviews)
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
                connection = http.client.HTTPSConnection(
                    "127.0.0.1", port, context=ssl.create_default_context(cafile=str(tmp / "ui.crt")), timeout=10)
                connection.request("GET", "/")
                connection.getresponse().read()
                connection.close()
                break
            except OSError:
                time.sleep(0.3)
        yield port, tmp / "ui.crt"
    finally:
        # Fast shutdown: a graceful one (SIGQUIT) waits for open connections, and a browser keeps the UI's
        # websocket open for as long as the page is shown (20 s lost to the timeout below, each time).
        nginx.send_signal(signal.SIGTERM)
        try:
            nginx.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(nginx.pid, signal.SIGKILL)
            nginx.wait(5)
