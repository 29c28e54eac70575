"""Identity of this engine, written into every output (file meta and declarations)."""

ENGINE_NAME = "imaging.deid"
# Bump on any change that can change output bytes: the version is part of the declared method,
# so two outputs with the same version were made by the same rules.
ENGINE_VERSION = "1.4.0"

# A constant UID of this project (a UUID made once, as `2.25.<int>`), never derived from a file.
IMPLEMENTATION_CLASS_UID = "2.25.180061902689507278226592266416329922441"
IMPLEMENTATION_VERSION_NAME = "EYEDEID_1_4_0"  # SH, at most 16 characters
