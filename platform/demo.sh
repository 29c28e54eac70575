#!/usr/bin/env bash
# The demo: set up, generate a synthetic eye hospital, materialize every asset for every demo
# partition, and print what was made and where. No cloud account; embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
./platform/setup.sh

export IMAGING_LANDING="${IMAGING_LANDING:-$PWD/data/landing}"
export IMAGING_WAREHOUSE="${IMAGING_WAREHOUSE:-$PWD/data/warehouse}"
if [ -z "${IMAGING_PSEUDONYM_KEY:-}" ]; then
  export IMAGING_PSEUDONYM_KEY="demo-only-key-not-secret"
  echo "NOTE: using the built-in DEMO pseudonym key. Never use it for real data: set IMAGING_PSEUDONYM_KEY."
fi
export DAGSTER_HOME="${DAGSTER_HOME:-$PWD/.dagster_home}"
mkdir -p "$DAGSTER_HOME" && cp platform/dagster.yaml "$DAGSTER_HOME/dagster.yaml"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"

# Three demo days from the configured start date, for every configured site.
read -r SITES FIRST LAST < <(.venv/bin/python -c '
import datetime as dt
from imaging.config import load_settings
s = load_settings(); d0 = dt.date.fromisoformat(s.start_date)
print(",".join(s.sites), d0, d0 + dt.timedelta(days=2))')
FIRST_SITE="${SITES%%,*}"; LAST_SITE="${SITES##*,}"
DATES="$FIRST,$(date -d "$FIRST + 1 day" +%F),$LAST"

echo "== Generating a synthetic hospital in $IMAGING_LANDING (sites $SITES, $FIRST to $LAST)"
.venv/bin/python -m synth --out "$IMAGING_LANDING" --seed 7 --sites "$SITES" --dates "$DATES"

echo "== Materializing raw_image_index, linked_patient_metadata, anonymized_images ($FIRST..$LAST x $SITES, one run)"
.venv/bin/dagster asset materialize -m definitions \
  --select raw_image_index,linked_patient_metadata,anonymized_images \
  --partition-range "$FIRST|$FIRST_SITE...$LAST|$LAST_SITE"
echo "== Materializing published_cohort"
.venv/bin/dagster asset materialize -m definitions --select published_cohort

echo "== What was made"
.venv/bin/python -m imaging.report
cat <<MSG

Open the Dagster UI on this instance (materializations, lineage, backfills per date or site):
  ./platform/ui.sh    then browse http://127.0.0.1:3000
MSG
