"""optout_list: the sites' opt-out lists as an observable source asset, one data version per site.

Not materialized by the platform (the hub lands the lists it obtains from NHS England's opt-out service
and its local objection registers); observed. Files: `optouts/<site>/<YYYY-MM-DD>.csv` in the landing zone,
the date being the day received; a whole list or add/remove changes (imaging/optout.py says which is which
and why both). A site's data version is the keyed digest of its effective list (never an id: a plain hash
of a short list of NHS numbers could be reversed by trying them all), so the UI shows when a list changed,
and `anonymized_images` (which reads every site's list: an opt-out is a person's, at every site) and
`published_cohort` show as unsynced after it did. Observed from the UI ("Observe"); the runs that apply the
lists also record the versions they read.
"""

from __future__ import annotations

import warnings

from dagster import BetaWarning, DataVersionsByPartition, StaticPartitionsDefinition, observable_source_asset

from assets.optouts import read_optouts
from assets.partitions import SETTINGS
from assets.versions import OPTOUT, optout_observations
from imaging.catalogue import markdown_safe
from resources.deid import Deidentifier
from resources.landing import LandingZone

# Observable source assets are beta in Dagster 1.13; we depend on them deliberately.
warnings.filterwarnings("ignore", message="Function `observable_source_asset`", category=BetaWarning)

SITES = StaticPartitionsDefinition(list(SETTINGS.sites))


@observable_source_asset(
    name=OPTOUT,
    partitions_def=SITES,
    group_name="imaging",
    description=markdown_safe(
        "Identifiable zone, read-only. Each site's opt-out list (national data opt-out, local objections): "
        "optouts/<site>/<YYYY-MM-DD>.csv in the landing zone, dated the day received; a whole list (patient_id) "
        "or changes (patient_id, action add|remove). The data version of a site is a keyed digest of its "
        "effective list; the observation counts its patients, files and quarantined rows, never an id."),
)
def optout_list(context, landing: LandingZone, deid: Deidentifier) -> DataVersionsByPartition:
    # Each site's observation is logged here with its version and counts; nothing is left for Dagster to log.
    for event in optout_observations(read_optouts(landing.root), deid.key):
        context.log_event(event)
    return DataVersionsByPartition({})
