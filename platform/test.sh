#!/usr/bin/env bash
# The test command: set up the environment, then run the whole suite (arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
./platform/setup.sh
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
exec .venv/bin/python -m pytest "$@"
