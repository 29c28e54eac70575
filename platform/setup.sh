#!/usr/bin/env bash
# Makes the project's environment in .venv from the hash-pinned lock file. Safe to re-run:
# it reinstalls only when requirements.lock or pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  echo "Spark needs Java 17 or 21 and none was found on PATH." >&2
  echo "  Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless" >&2
  echo "  macOS:         brew install openjdk@17" >&2
  exit 1
fi

PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
stamp=".venv/.installed-$(cat requirements.lock pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --require-hashes -r requirements.lock
  # The project itself, editable, so Spark's Python workers import the same code; built with
  # the locked setuptools (no build isolation), so nothing unpinned is downloaded.
  .venv/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
  rm -f .venv/.installed-* && touch "$stamp"
  echo "Environment ready in .venv"
fi

# The driver JVM's class-data-sharing archive (platform/spark_archive.py): Spark sessions start in about
# half the time. Made once per JDK and pyspark (~40 s); without it sessions start as before.
.venv/bin/python platform/spark_archive.py 2>.venv/spark-archive.log \
  || echo "Spark class archive not made (see .venv/spark-archive.log); Spark starts without it" >&2
