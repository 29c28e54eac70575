#!/usr/bin/env bash
# The test command: set up the environment, then run the whole suite (arguments go to pytest).
#
# The suite runs on two parallel workers (pytest-xdist, IMAGING_TEST_WORKERS to change the number) with
# `--dist loadgroup`: tests sharing a world (a warehouse, a server, ports) run on one worker, in file order
# (tests/conftest.py, "Parallel runs"). Given -n, or -s (a worker's output is not shown), it runs as
# pytest is told: `./platform/test.sh -n 0 tests/test_x.py` runs in this process.
set -euo pipefail
cd "$(dirname "$0")/.."
./platform/setup.sh
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
parallel=(-n "${IMAGING_TEST_WORKERS:-2}" --dist loadgroup)
for arg in "$@"; do
  case "$arg" in
    -n|-n[0-9]*|--numprocesses|--numprocesses=*|-s|--capture=no|--pdb) parallel=() ;;
  esac
done
exec .venv/bin/python -m pytest "${parallel[@]}" "$@"
