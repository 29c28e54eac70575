"""Keyed, deterministic pseudonyms (HMAC-SHA256 over a secret key).

The same key and input always give the same output, on every executor, every run, every
site; without the key nothing can be reversed or recomputed. Each kind of value is hashed
under its own label, so a patient pseudonym can never collide with a UID or a date shift.
"""

from __future__ import annotations

import hashlib
import hmac

# The longest shift we apply, in days. Shifts are always backwards and never zero, so a
# shifted date never equals the real one and intervals between a patient's visits are kept.
MAX_DATE_SHIFT_DAYS = 3652


class Pseudonymizer:
    """Maps identifiers to stable pseudonyms under one secret key."""

    def __init__(self, key: str | bytes):
        if not key:
            raise ValueError("a pseudonym key is required (set IMAGING_PSEUDONYM_KEY)")
        self._key = key.encode() if isinstance(key, str) else bytes(key)

    def __repr__(self) -> str:  # never show the key
        return "Pseudonymizer(<key hidden>)"

    def digest(self, label: str, *parts: str) -> bytes:
        """HMAC-SHA256 of the label and parts, unambiguously joined."""
        message = "\x1f".join([label, *(p or "" for p in parts)]).encode()
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def patient_id(self, issuer: str, patient_id: str) -> str:
        """Pseudonymous patient id, stable for the same issuer and id across dates and sites."""
        return "P" + self.digest("patient", issuer.strip(), patient_id.strip()).hex()[:24].upper()

    def uid(self, uid: str) -> str:
        """A `2.25.` UID (a version-8 UUID as an integer) standing for `uid` wherever it appears."""
        raw = bytearray(self.digest("uid", uid.strip().rstrip("\x00"))[:16])
        raw[6] = (raw[6] & 0x0F) | 0x80  # UUID version 8: custom, name-derived
        raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 9562 variant
        return "2.25." + str(int.from_bytes(raw, "big"))

    def date_shift_days(self, issuer: str, patient_id: str) -> int:
        """Per-patient shift in days, in [-MAX_DATE_SHIFT_DAYS, -1]: never zero, same for all the patient's dates."""
        value = int.from_bytes(self.digest("date-shift", issuer.strip(), patient_id.strip())[:8], "big")
        return -(1 + value % MAX_DATE_SHIFT_DAYS)

    def token(self, label: str, *parts: str, length: int = 20) -> str:
        """Opaque lower-case hex token for any other value (for example a partition's folder name)."""
        return self.digest(label, *parts).hex()[:length]
