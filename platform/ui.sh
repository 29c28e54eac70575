#!/usr/bin/env bash
# Opens the Dagster UI on the demo's instance (run ./platform/demo.sh first): the demo's DAGSTER_HOME,
# landing zone and warehouse, `dagster dev` (webserver + daemon) on 127.0.0.1 only.
#   ./platform/ui.sh            then browse http://127.0.0.1:3000 (UI_PORT=8080 ./platform/ui.sh to move it)
# To expose it to other machines, put it behind the authenticating proxy in platform/proxy/ (README).
set -euo pipefail
cd "$(dirname "$0")/.."
./platform/setup.sh

source platform/demo-env.sh
[ -f "$DAGSTER_HOME/dagster.yaml" ] || cp platform/dagster.yaml "$DAGSTER_HOME/dagster.yaml"
[ -d "$IMAGING_LANDING" ] || echo "NOTE: no landing zone at $IMAGING_LANDING yet: run ./platform/demo.sh first."

echo "Dagster UI on http://127.0.0.1:${UI_PORT:-3000} (instance $DAGSTER_HOME). Ctrl-C stops it."
exec .venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p "${UI_PORT:-3000}"
