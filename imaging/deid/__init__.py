"""De-identification of DICOM files by DICOM PS3.15 Annex E (Table E.1-1, rev 2024b).

    from imaging.deid import load_profile, deidentify, Quarantined, to_bytes
    profile = load_profile()                    # the research default; picklable, cached per process
    out = deidentify(ds, pseudonymizer=p, profile=profile, issuer_default="NHS",
                     extra_identifiers=("Jane Smith", "9434765919"))
    data = to_bytes(out)                        # deterministic Part 10 bytes

Pure functions: no Spark, no Dagster, no clock, no randomness. See docs/deidentification.md.
"""

from .engine import deidentify
from .errors import Quarantined
from .options import OPTIONS, RESEARCH_DEFAULT
from .output import to_bytes
from .profile import DeidProfile, load_profile
from .quiet import quiet
from .version import ENGINE_VERSION

OPTION_NAMES = tuple(o.name for o in OPTIONS)

__all__ = [
    "DeidProfile", "ENGINE_VERSION", "OPTION_NAMES", "Quarantined", "RESEARCH_DEFAULT",
    "deidentify", "load_profile", "quiet", "to_bytes",
]
