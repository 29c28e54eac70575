"""The de-identification engine before issue 48, as the reference its replacement is proven equal to.

    from deid_reference import deidentify
    out = deidentify(ds, pseudonymizer=p, namespace="NHS", profile=load_profile(), pixel_text=detector)

Its modules are today's `imaging/deid/engine.py`, `rules.py` and `passthrough.py` as they stood at the
branch point (only their imports changed), with main's later method text (issue 44: the screen that read the
pixels and the frames it read, `declare.screened`; the redaction told the image type's settings); every value-level module (table, profile, scrub, timeshift,
uids, values, declarations) is the shipped one, shared with the new engine.
"""

from .engine import deidentify, deidentify_image

__all__ = ["deidentify", "deidentify_image"]
