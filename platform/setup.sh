#!/usr/bin/env bash
# Makes the project's environment in .venv from the hash-pinned lock file. Safe to re-run:
# it reinstalls only when requirements.lock or pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every system prerequisite first, all named at once, in seconds: nothing is built until they are met.
# (Tesseract and its English model come from the lock file; the demo needs only Python and Java.)
PYTHON="${PYTHON:-python3}"
missing=()
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  missing+=("Python 3.11 or newer ($PYTHON not found; set PYTHON=/path/to/python3.11 to use another)")
elif ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  missing+=("Python 3.11 or newer ($PYTHON is $("$PYTHON" -c 'import platform; print(platform.python_version())'))")
elif [ ! -x .venv/bin/python ] && ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
  missing+=("Python's venv module with pip (Debian/Ubuntu: sudo apt-get install -y python3-venv)")
fi
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1; then
  missing+=("Java 17 or 21 for Spark (Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless; macOS: brew install openjdk@17)")
elif [ "$(java_major)" -lt 17 ] 2>/dev/null || [ -z "$(java_major)" ]; then
  missing+=("Java 17 or 21 for Spark (found: $(java -version 2>&1 | head -1))")
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "Cannot set up: install first" >&2
  printf '  - %s\n' "${missing[@]}" >&2
  exit 1
fi

stamp=".venv/.installed-$(cat platform/pip.lock requirements.lock pyproject.toml | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  # The pinned pip first (platform/pip.in says why), then the lock with it.
  .venv/bin/python -m pip install --quiet --require-hashes -r platform/pip.lock
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
