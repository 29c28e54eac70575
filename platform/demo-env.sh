# Sourced by demo.sh and ui.sh (from the checkout's root): the demo's environment, in one place.
# Every value is a default: what the caller exported wins.
export IMAGING_LANDING="${IMAGING_LANDING:-$PWD/data/landing}"
export IMAGING_WAREHOUSE="${IMAGING_WAREHOUSE:-$PWD/data/warehouse}"
if [ -z "${IMAGING_PSEUDONYM_KEY:-}" ]; then
  # The demo's data is pseudonymised with this key; runs launched from the UI must use the same one.
  # The same literal as imaging/pseudonym.py's DEMO_KEY (tests/test_key_protection.py holds them equal):
  # a release made with it says "demo key: not for real data" in its data card.
  export IMAGING_PSEUDONYM_KEY="demo-only-pseudonym-key-never-for-real-data"
  echo "NOTE: using the built-in DEMO pseudonym key. Never use it for real data: set IMAGING_PSEUDONYM_KEY."
fi
if [ -z "${IMAGING_MIN_K:-}" ]; then
  # Twelve synthetic patients cannot make a k=5 cohort: every release would be blocked.
  export IMAGING_MIN_K=1
  echo "NOTE: the demo hospital has 12 patients, so the demo lowers the k-anonymity minimum to 1 (default 5; the data card records it)."
fi
if [ -z "${IMAGING_END_DATE:-}" ] && [ -x .venv/bin/python ]; then
  # The demo's hospital is three days from the first date partition: its partitions end there too, so the UI's
  # partition grids show what exists (not years of empty days up to today). Unset for real data.
  IMAGING_END_DATE="$(.venv/bin/python -c 'import datetime as dt
from imaging.driver.config import load_settings
print(dt.date.fromisoformat(load_settings().start_date) + dt.timedelta(days=2))')"
  export IMAGING_END_DATE
fi
if [ -z "${IMAGING_APPROVERS:-}" ]; then
  # Two DEMO approver keys (public seeds: anybody can make them) in the demo's data folder, never in the
  # repository or the de-identified zone; the review flags their fingerprints.
  export DEMO_APPROVER_KEYS="$PWD/data/demo-approvers"
  export IMAGING_APPROVERS="$(.venv/bin/imaging-review demo-keys "$DEMO_APPROVER_KEYS")"
  echo "NOTE: releases are approved by two DEMO approver keys ($DEMO_APPROVER_KEYS). Never for real data: list your reviewers' keys in platform/approvers or IMAGING_APPROVERS."
fi
export DAGSTER_HOME="${DAGSTER_HOME:-$PWD/.dagster_home}"
mkdir -p "$DAGSTER_HOME"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
