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

# Failure messages, seen locally: unless IMAGING_PLATFORM_DIR says otherwise, the demo's UI runs on a copy of
# platform/ whose ui.yaml sends them to a local SMTP sink (aiosmtpd) that keeps each message as a file in
# data/mail/new/ (a Maildir). Turn a sensor on (Automation > notify_run_failures) and a failed run's mail lands there.
SINK=""
if [ -z "${IMAGING_PLATFORM_DIR:-}" ]; then
  SMTP_PORT="${DEMO_SMTP_PORT:-8025}"
  export IMAGING_PLATFORM_DIR="$PWD/data/demo-platform"
  rm -rf "$IMAGING_PLATFORM_DIR" && cp -r platform "$IMAGING_PLATFORM_DIR"
  sed -i "s|^  smtp: null|  smtp: {host: 127.0.0.1, port: $SMTP_PORT, sender: dagster@demo.invalid, to: [operator@demo.invalid], starttls: false}|" \
    "$IMAGING_PLATFORM_DIR/ui.yaml"
  mkdir -p data/mail
  .venv/bin/python -m aiosmtpd -n -l "127.0.0.1:$SMTP_PORT" -c aiosmtpd.handlers.Mailbox "$PWD/data/mail" &
  SINK=$!
  echo "Failure messages (sensors notify_run_failures, notify_failed_checks; off until turned on) go to a local SMTP sink: data/mail/new/"
fi
stop_sink() { [ -n "$SINK" ] && kill "$SINK" 2>/dev/null || true; }
trap stop_sink EXIT

echo "Dagster UI on http://127.0.0.1:${UI_PORT:-3000} (instance $DAGSTER_HOME). Ctrl-C stops it."
.venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p "${UI_PORT:-3000}"
