"""The pseudonym key's protection, without a server: its length rule, its fingerprint, and the masters
it may not be sent to (a standalone cluster without its shared secret, a remote Connect server without
TLS). The standalone run over an authenticated, encrypted cluster is in tests/test_deployments.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from imaging.governance.datacard import DEMO_KEY_NOTE, key_section, render_markdown
from imaging.pseudonym import DEMO_KEY, DEMO_KEY_FINGERPRINT, MIN_KEY_BYTES, check_key, key_fingerprint
from resources.spark import (AUTH_SECRET_ENV, DAEMON_CONF, STANDALONE_SECURITY, check_master, connect_transport_error,
                             is_loopback, session_config, spark_config)

REPO = Path(__file__).resolve().parents[1]
LONG_KEY = "a-long-enough-key-for-the-tests-" + "z" * 8


# --- the key's length ------------------------------------------------------------------------------

def test_a_key_of_32_bytes_is_accepted_and_a_shorter_one_refused_without_echoing_it():
    assert check_key("k" * MIN_KEY_BYTES) == "k" * MIN_KEY_BYTES
    short = "short-secret-key-31-bytes-long!"
    assert len(short.encode()) == MIN_KEY_BYTES - 1
    with pytest.raises(ValueError) as refused:
        check_key(short)
    message = str(refused.value)
    assert "IMAGING_PSEUDONYM_KEY" in message and "32 bytes" in message and short not in message
    assert "31" not in message  # not even its length


def test_the_length_is_counted_in_utf8_bytes():
    assert check_key("é" * 16)  # 16 characters, 32 bytes
    with pytest.raises(ValueError):
        check_key("k" * 31)


def test_a_missing_key_is_refused_naming_the_variable():
    """By the run's Deidentifier resource (an empty IMAGING_PSEUDONYM_KEY), as a run sets it up."""
    from resources.deid import Deidentifier

    def key_of(value: str) -> str:
        return Deidentifier(pseudonym_key=value, options=[], issuers={}, pixel_text={}).key

    with pytest.raises(ValueError, match="IMAGING_PSEUDONYM_KEY is not set"):
        key_of("")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        key_of("too-short")
    assert key_of(LONG_KEY) == LONG_KEY


def test_the_deidentifier_resource_refuses_a_short_key():
    from resources.deid import Deidentifier

    short = Deidentifier(pseudonym_key="too-short-a-key", options=[], issuers={}, pixel_text={})
    with pytest.raises(ValueError, match="IMAGING_PSEUDONYM_KEY is too short") as refused:
        short.pseudonymizer()
    assert "too-short-a-key" not in str(refused.value)
    good = Deidentifier(pseudonym_key=LONG_KEY, options=[], issuers={}, pixel_text={})
    assert good.run_metadata() == {"pseudonym_key_fingerprint": key_fingerprint(LONG_KEY)}


# --- the fingerprint -------------------------------------------------------------------------------

def test_the_fingerprint_is_stable_keyed_and_holds_nothing_of_the_key():
    fingerprint = key_fingerprint(LONG_KEY)
    assert re.fullmatch(r"[0-9a-f]{16}", fingerprint)
    assert fingerprint == key_fingerprint(LONG_KEY) == key_fingerprint(LONG_KEY.encode())
    assert fingerprint != key_fingerprint(LONG_KEY + "x")
    # A fixed value, so a change of how it is computed shows here (it would orphan recorded fingerprints).
    # (openssl: printf %s "imaging pseudonym key fingerprint" | openssl dgst -sha256 -hmac "$KEY")
    assert key_fingerprint("k" * 32) == "1a998635a9a7211b"
    for piece in (LONG_KEY[i:i + 4] for i in range(0, len(LONG_KEY) - 4)):
        assert piece.encode().hex() not in fingerprint


def test_the_demo_key_is_the_one_demo_env_exports_and_long_enough():
    exported = subprocess.run(["bash", "-c", "unset IMAGING_PSEUDONYM_KEY; . platform/demo-env.sh >/dev/null; "
                               "printf %s \"$IMAGING_PSEUDONYM_KEY\""], cwd=REPO, capture_output=True,
                              text=True, env={"PATH": "/usr/bin:/bin", "DAGSTER_HOME": "/tmp/demo-env-probe",
                                              "HOME": "/tmp"}, timeout=30)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == DEMO_KEY
    assert check_key(DEMO_KEY) and DEMO_KEY_FINGERPRINT == key_fingerprint(DEMO_KEY)


def test_the_card_marks_a_demo_key_release_and_only_that():
    demo, real = key_section(DEMO_KEY_FINGERPRINT), key_section(key_fingerprint(LONG_KEY))
    assert demo == {"fingerprint": DEMO_KEY_FINGERPRINT, "demo_key": True, "note": DEMO_KEY_NOTE}
    assert real == {"fingerprint": key_fingerprint(LONG_KEY), "demo_key": False}
    assert key_section(None)["demo_key"] is None
    with pytest.raises(ValueError):
        key_section(LONG_KEY)  # a key passed by mistake is not written into the card


# --- the masters the key may be sent to -----------------------------------------------------------

@pytest.mark.parametrize("remote", [
    "sc://127.0.0.1:15002", "sc://127.8.9.10:15002", "sc://localhost:15002", "sc://LOCALHOST",
    "sc://[::1]:15002", "sc://[::ffff:127.0.0.1]:15002",
    "sc://connect.internal:443/;use_ssl=true", "sc://10.0.0.7:15002/;user_id=etl;use_ssl=TRUE",
])
def test_connect_to_loopback_or_over_tls_is_allowed(remote):
    assert connect_transport_error(remote) is None
    check_master(remote, {})


@pytest.mark.parametrize("remote", [
    "sc://10.0.0.7:15002", "sc://connect.internal:15002/;token=abc", "sc://connect.internal/;use_ssl=false",
    "sc://128.0.0.1:15002", "sc://localhost.example.org:15002", "sc://[::2]:15002", "sc://0.0.0.0:15002",
    "sc://:15002",
])
def test_connect_off_this_machine_without_tls_is_refused_before_any_session(remote):
    error = connect_transport_error(remote)
    assert error and "IMAGING_SPARK_MASTER" in error
    with pytest.raises(RuntimeError):
        spark_config(remote, env={}, archive=None)


@pytest.mark.parametrize("remote", ["sc://connect.internal:443/;use_ssl=true;token=abc-token",
                                    "sc://localhost:15002/;token=abc-token"])
def test_a_token_in_the_master_url_is_refused_it_would_show_in_the_ui(remote):
    error = connect_transport_error(remote)
    assert error and "SPARK_CONNECT_AUTHENTICATE_TOKEN" in error and "abc-token" not in error


def test_loopback_hosts():
    assert all(is_loopback(h) for h in ("localhost", "127.0.0.1", "127.255.0.9", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("10.0.0.1", "example.org", "0.0.0.0", "::", "128.0.0.1"))


def test_a_standalone_master_without_the_shared_secret_is_refused_naming_the_variable():
    with pytest.raises(RuntimeError, match=AUTH_SECRET_ENV):
        spark_config("spark://master.internal:7077", env={}, archive=None)
    with pytest.raises(RuntimeError, match=AUTH_SECRET_ENV):  # checked again where the session starts
        session_config({"spark.master": "spark://master.internal:7077"}, env={})


def test_the_code_location_refuses_a_standalone_master_without_the_secret_at_load():
    """A fresh process, as a deployment loads the definitions: the error names the variable; no session."""
    env = {k: v for k, v in os.environ.items() if k != AUTH_SECRET_ENV}
    env["IMAGING_SPARK_MASTER"] = "spark://127.0.0.1:7077"
    done = subprocess.run([sys.executable, "-c", "import definitions"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0 and f"{AUTH_SECRET_ENV} is not set" in done.stderr, done.stderr[-2000:]
    assert "SparkContext" not in done.stderr and env["IMAGING_PSEUDONYM_KEY"] not in done.stderr


def test_a_standalone_master_gets_authentication_and_encryption_and_the_secret_only_at_session_start():
    env = {AUTH_SECRET_ENV: "cluster-secret-value"}
    config = spark_config("spark://master.internal:7077", env=env, archive=None)
    assert STANDALONE_SECURITY.items() <= config.items()
    assert config["spark.authenticate"] == config["spark.network.crypto.enabled"] == "true"
    # The resource's configuration (shown in Dagster's UI) never holds the secret...
    assert "cluster-secret-value" not in json.dumps(config)
    # ...the session's does.
    assert session_config(config, env)["spark.authenticate.secret"] == "cluster-secret-value"


def test_local_mode_gets_no_security_settings_and_the_platform_worker_daemon():
    config = spark_config("local[2]", env={AUTH_SECRET_ENV: "unused"}, archive=None)
    assert not any(k.startswith(("spark.authenticate", "spark.network.crypto")) for k in config)
    session = session_config(config, {})
    assert {k: v for k, v in session.items() if k not in config} == {
        DAEMON_CONF: "imaging.worker_daemon",
        "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false"}
    # A cluster's executors keep Spark's own daemon: the platform is not installed there.
    standalone = spark_config("spark://master.internal:7077", env={AUTH_SECRET_ENV: "s"}, archive=None)
    assert DAEMON_CONF not in session_config(standalone, {AUTH_SECRET_ENV: "s"})


def test_the_card_renders_the_demo_mark(tmp_path):
    from release_helpers import build_release, make_hospital

    built = build_release(make_hospital(tmp_path / "hospital"), tmp_path / "release", key=DEMO_KEY)
    card = json.loads((Path(built.root) / "datacard.json").read_text())
    assert card["pseudonym_key"] == key_section(DEMO_KEY_FINGERPRINT)
    markdown = (Path(built.root) / "datacard.md").read_text()
    assert DEMO_KEY_NOTE.upper() in markdown and DEMO_KEY_FINGERPRINT in markdown
    assert DEMO_KEY not in markdown and DEMO_KEY not in json.dumps(card)
    assert render_markdown(card) == markdown
