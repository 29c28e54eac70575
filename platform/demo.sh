#!/usr/bin/env bash
# The demo: set up, generate a synthetic eye hospital, materialize every asset for every demo
# partition, and print what was made and where. No cloud account; embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
./platform/setup.sh

source platform/demo-env.sh
cp platform/dagster.yaml "$DAGSTER_HOME/dagster.yaml"

# Three demo days from the configured start date, for every configured site.
read -r SITES FIRST LAST < <(.venv/bin/python -c '
import datetime as dt
from imaging.driver.config import load_settings
s = load_settings(); d0 = dt.date.fromisoformat(s.start_date)
print(",".join(s.sites), d0, d0 + dt.timedelta(days=2))')
FIRST_SITE="${SITES%%,*}"; LAST_SITE="${SITES##*,}"
DATES="$FIRST,$(date -d "$FIRST + 1 day" +%F),$LAST"

echo "== Generating a synthetic hospital in $IMAGING_LANDING (sites $SITES, $FIRST to $LAST)"
.venv/bin/python -m synth --out "$IMAGING_LANDING" --seed 7 --sites "$SITES" --dates "$DATES"

# As the landing sensor does before it requests a run: the data cards then name each input's landing version.
echo "== Observing landing_zone: one data version per landed site-day (a hash of its listing)"
.venv/bin/python -c '
from dagster import DagsterInstance
from dagster._core.definitions.observe import observe

from assets.landing_zone import landing_zone
from definitions import defs

with DagsterInstance.get() as instance:
    result = observe([landing_zone], instance=instance, resources={"landing": defs.resources["landing"]})
    print(f"{len(result.get_asset_observation_events())} landed site-days observed")'
echo "== Materializing raw_image_index, linked_patient_metadata, anonymized_images ($FIRST..$LAST x $SITES, one run)"
.venv/bin/dagster asset materialize -m definitions \
  --select raw_image_index,linked_patient_metadata,anonymized_images \
  --partition-range "$FIRST|$FIRST_SITE...$LAST|$LAST_SITE"
echo "== Materializing published_cohort: each release is built and held for approval"
.venv/bin/dagster asset materialize -m definitions --select published_cohort
echo "== Held releases (imaging-review pending: path, cohort, version, release id, status)"
.venv/bin/imaging-review pending
echo "NOTE: the demo approves its own releases with two DEMO approver keys ($IMAGING_APPROVERS lists them;"
echo "      their seeds are public, and every review flags them). For real data two governance reviewers read"
echo "      \`imaging-review <held path> --html review.html\` and each signs with their own key:"
echo "      \`imaging-review approve <held path> --key ~/.ssh/id_ed25519\`."
if [ -z "${DEMO_APPROVER_KEYS:-}" ]; then
  echo "IMAGING_APPROVERS is set ($IMAGING_APPROVERS): the demo does not sign for your approvers; approve the held"
  echo "releases above with your keys, then materialize published_cohort again."
  exit 0
fi
.venv/bin/imaging-review pending | cut -f1 | while read -r held; do
  for principal in demo-approver-1 demo-approver-2; do
    .venv/bin/imaging-review approve "$held" --key "$DEMO_APPROVER_KEYS/$principal" \
      --note "approved by platform/demo.sh with a DEMO key, not by a reviewer"
  done
done
echo "== Materializing published_cohort again: publishes exactly what was approved"
.venv/bin/dagster asset materialize -m definitions --select published_cohort

echo "== What was made"
.venv/bin/python -m imaging.governance.report
release="$(ls -d "$IMAGING_WAREHOUSE"/deidentified/cohorts/*/v* | head -1)"
echo "== The lineage of one published release, as a governance reviewer sees it (IMAGING_WAREHOUSE set)"
.venv/bin/imaging-review "$release" --html "$PWD/data/review.html" | grep -v '^    \|^  images/'
cat <<MSG

Review any release or published file offline (the HTML draws the column lineage):
  .venv/bin/imaging-review $release --html review.html

Open the Dagster UI on this instance (materializations, lineage, backfills per date or site):
  ./platform/ui.sh    then browse http://127.0.0.1:3000
MSG
