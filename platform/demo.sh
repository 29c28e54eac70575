#!/usr/bin/env bash
# The demo: set up, generate a synthetic eye hospital, materialize every asset for every demo
# partition, and print what was made and where. No cloud account; embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
./platform/setup.sh

source platform/demo-env.sh
cp platform/dagster.yaml "$DAGSTER_HOME/dagster.yaml"

# The demo's days: from the configured start date to the end date demo-env.sh set, for every configured site.
read -r SITES FIRST LAST < <(.venv/bin/python -c '
from imaging.driver.config import load_settings
s = load_settings()
print(",".join(s.sites), s.start_date, s.end_date)')
FIRST_SITE="${SITES%%,*}"; LAST_SITE="${SITES##*,}"
# published_cohort has one partition per cohort file (by its name, in name order): every cohort at once is the range
# from the first to the last, one run.
read -r FIRST_COHORT LAST_COHORT < <(.venv/bin/python -c '
from assets.partitions import COHORTS
keys = COHORTS.get_partition_keys()
print(keys[0], keys[-1])' 2>/dev/null)
DATES="$(.venv/bin/python -c 'import datetime as dt, sys
a, b = (dt.date.fromisoformat(d) for d in sys.argv[1:])
print(",".join(str(a + dt.timedelta(days=i)) for i in range((b - a).days + 1)))' "$FIRST" "$LAST")"

# The demo's runs are launched through the instance, as the UI launches them: queued, started by the daemon
# from the code location (workspace.yaml). So they carry the code location and show in the UI's Overview, the
# jobs' pages and the run list, with who launched them and why (imaging/launched_by, imaging/reason).
mkdir -p data
# The instance's storage made first, by one process: the daemon and the first launch would otherwise both create a
# fresh instance's tables at once, and the loser stops ("table alembic_version already exists").
.venv/bin/python -c 'from dagster import DagsterInstance; DagsterInstance.get().dispose()'
setsid .venv/bin/dagster-daemon run -w workspace.yaml >data/dagster-daemon.log 2>&1 &
DAEMON=$!
stop_daemon() { kill -TERM -- "-$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; }
trap stop_daemon EXIT
launch() {  # JOB REASON [FIRST_PARTITION...LAST_PARTITION]
  local job="$1" reason="$2" range="${3:-}" id tags
  id="$(.venv/bin/python -c 'import uuid; print(uuid.uuid4())')"
  tags="{\"imaging/launched_by\": \"platform/demo.sh\", \"imaging/reason\": \"$reason\""
  if [ -n "$range" ]; then
    tags="$tags, \"dagster/asset_partition_range_start\": \"${range%...*}\", \"dagster/asset_partition_range_end\": \"${range#*...}\""
  fi
  # Its code server's chatter goes to a log; shown only if the launch fails.
  if ! .venv/bin/dagster job launch -w workspace.yaml -j "$job" --run-id "$id" --tags "$tags}" \
       >data/dagster-launch.log 2>&1; then
    cat data/dagster-launch.log >&2
    exit 1
  fi
  .venv/bin/python platform/await_run.py "$id"
}

echo "== Generating a synthetic hospital in $IMAGING_LANDING (sites $SITES, $FIRST to $LAST)"
# With a small opt-out list (two imaged patients of the first site, received on the first day, and one row
# keyed by a placeholder id, which is quarantined): their images are never de-identified nor released.
.venv/bin/python -m synth --out "$IMAGING_LANDING" --seed 7 --sites "$SITES" --dates "$DATES" --optouts 2

# No separate observation of landing_zone: the pipeline's run records the landing version of each site-day it
# reads (as the landing sensor would), so the data cards and the UI's lineage name it.
echo "== Job site_day_pipeline: raw_image_index, linked_patient_metadata, anonymized_images ($FIRST..$LAST x $SITES, one run)"
launch site_day_pipeline "the demo's hospital, every site-day" "$FIRST|$FIRST_SITE...$LAST|$LAST_SITE"
echo "== Job publish, every cohort ($FIRST_COHORT...$LAST_COHORT, one run): each release is built and held for approval"
launch publish "build the demo's releases and hold them for approval" "$FIRST_COHORT...$LAST_COHORT"
echo "== Held releases (imaging-review pending: path, cohort, version, release id, status)"
.venv/bin/imaging-review pending
echo "NOTE: the demo approves its own releases with two DEMO approver keys ($IMAGING_APPROVERS lists them;"
echo "      their seeds are public, and every review flags them). For real data two governance reviewers read"
echo "      \`imaging-review <held path> --html review.html\` (or the same review on the cohort's partition of"
echo "      published_cohort in the UI) and each signs with their own key:"
echo "      \`imaging-review approve <held path> --key ~/.ssh/id_ed25519\`."
if [ -z "${DEMO_APPROVER_KEYS:-}" ]; then
  echo "IMAGING_APPROVERS is set ($IMAGING_APPROVERS): the demo does not sign for your approvers; approve the held"
  echo "releases above with your keys, then materialize every cohort of published_cohort again (README: the range"
  echo "$FIRST_COHORT...$LAST_COHORT from the shell, or a backfill of job publish from the UI)."
  exit 0
fi
.venv/bin/imaging-review pending | cut -f1 | while read -r held; do
  for principal in demo-approver-1 demo-approver-2; do
    .venv/bin/imaging-review approve "$held" --key "$DEMO_APPROVER_KEYS/$principal" \
      --note "approved by platform/demo.sh with a DEMO key, not by a reviewer"
  done
done
echo "== Job publish again, every cohort: publishes exactly what was approved"
launch publish "publish what the demo approved" "$FIRST_COHORT...$LAST_COHORT"
stop_daemon

echo "== What was made"
.venv/bin/python -m imaging.governance.report
release="$(ls -d "$IMAGING_WAREHOUSE"/deidentified/cohorts/*/v* | head -1)"
echo "== The opt-out list as the data card of $release states it (counts below 10 shown as <10)"
sed -n '/^## Opt-outs/,/^## Released columns/p' "$release/datacard.md" | sed '$d'
stamped="$IMAGING_WAREHOUSE/deidentified/cohorts/amd-oct/v1"
if [ -f "$stamped/metadata.parquet" ]; then
  echo "== Clinical labels stamped into each image of $stamped (platform/cohorts/amd_oct.yaml, stamp:)"
  sed -n '/^## Labels in the images/,/^## Released columns/p' "$stamped/datacard.md" | sed '$d' | sed -n '1,20p'
  echo "-- pydicom.dcmread of its first image:"
  .venv/bin/python - "$stamped" <<'PY'
import sys, pydicom, pyarrow.parquet as pq
root = sys.argv[1]
row = pq.read_table(f"{root}/metadata.parquet").to_pylist()[0]
ds = pydicom.dcmread(f"{root}/{row['file']}", stop_before_pixels=True)
labels = ds.private_block(0x0013, "IMAGING RELEASE LABELS")
print(f"ClinicalTrialProtocolID {ds.ClinicalTrialProtocolID}, SubjectID {ds.ClinicalTrialSubjectID}, "
      f"TimePointID {ds.ClinicalTrialTimePointID}, PatientSex {ds.get('PatientSex', '')!r}")
for offset in range(1, 256):
    if offset not in labels:
        break
    print(f"{labels.get_tag(offset)} {labels[offset].VR} {labels[offset].value!r}")
PY
fi
echo "== The lineage of one published release, as a governance reviewer sees it (IMAGING_WAREHOUSE set)"
.venv/bin/imaging-review "$release" | grep -v '^    \|^  images/'
echo "== The whole review of each release, written by the run that built it (the UI links each from its cohort):"
ls "$IMAGING_WAREHOUSE"/identifiable/reviews/
cat <<MSG

Review any release or published file offline (the HTML draws the column lineage):
  .venv/bin/imaging-review $release --html review.html

Open the Dagster UI on this instance (materializations, lineage, backfills per date or site):
  ./platform/ui.sh    then browse http://127.0.0.1:3000
Each cohort's review is on its partition of published_cohort (Catalog > published_cohort > Partitions > a cohort:
metadata "review"), its site-days linked to their pages and checks. Build every cohort again at once from the UI
with a backfill (Jobs > publish > Materialize..., All), or from the shell:
  .venv/bin/dagster asset materialize -m definitions --select published_cohort --partition-range "$FIRST_COHORT...$LAST_COHORT"
MSG
