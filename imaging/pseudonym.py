"""Keyed, deterministic pseudonyms (HMAC-SHA256 over a secret key).

The same key and input always give the same output, on every executor, every run, every
site; without the key nothing can be reversed or recomputed. Each kind of value is hashed
under its own label, so a patient pseudonym can never collide with a UID or a date shift.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import hmac
from dataclasses import dataclass

# The longest shift we apply, in days. Shifts are always backwards and at least two days (then the
# sub-day part, below, is added: the full offset is at least 25 hours), so a shifted date never
# equals the real one, with or without its time, and intervals between a patient's visits are kept.
MAX_DATE_SHIFT_DAYS = 3652
MIN_DATE_SHIFT_DAYS = 2
# The sub-day part of the offset, in seconds: every time of day moves by 1 to 23 hours, so no time
# (not even an "HH" one) keeps its hour.
MIN_TIME_SHIFT_SECONDS = 3600
MAX_TIME_SHIFT_SECONDS = 86400 - 3600

DAY_SECONDS = 86400

KEY_VARIABLE = "IMAGING_PSEUDONYM_KEY"
# A deployment's key must be at least this many bytes (UTF-8): HMAC-SHA256's own output size, so the key
# is not the weaker part. `Pseudonymizer` itself takes any non-empty key (pure unit tests use short ones);
# the key a run uses goes through `check_key` first (imaging.driver.config, resources/deid.py).
MIN_KEY_BYTES = 32
# The demo's key, in this one place: platform/demo-env.sh exports the same literal (a test holds the two
# equal), and a data card whose key fingerprint is this key's says "demo key: not for real data".
DEMO_KEY = "demo-only-pseudonym-key-never-for-real-data"
# What the key fingerprint is an HMAC of: a fixed string, so the fingerprint says which key was used
# (the same key, the same fingerprint) and reveals nothing of any identifier or of the key.
FINGERPRINT_MESSAGE = b"imaging pseudonym key fingerprint"


def check_key(key: str | bytes | None) -> str | bytes:
    """`key` unchanged when it is long enough for a deployment; otherwise a clear error that names the
    variable and the rule, never the key (nor its length, which would say something about it)."""
    size = len(key.encode("utf-8") if isinstance(key, str) else bytes(key or b""))
    if not key:
        raise ValueError(f"{KEY_VARIABLE} is not set: it keys every pseudonym, UID and date shift. "
                         f"Set a random secret of at least {MIN_KEY_BYTES} bytes (the demo sets a demo key "
                         f"and says so).")
    if size < MIN_KEY_BYTES:
        raise ValueError(f"{KEY_VARIABLE} is too short: a pseudonym key must be at least {MIN_KEY_BYTES} bytes "
                         f"(UTF-8), for example `openssl rand -base64 48`.")
    return key


def key_fingerprint(key: str | bytes) -> str:
    """Which key a run used, without the key: the first 16 hex digits of HMAC-SHA256(key, a fixed string).

    Recorded in each image asset's materialization metadata and in every release's data card, so two
    runs (or a release and a run) can be seen to share a key, and a demo-key release be told apart.
    """
    raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    return hmac.new(raw, FINGERPRINT_MESSAGE, hashlib.sha256).hexdigest()[:16]


DEMO_KEY_FINGERPRINT = key_fingerprint(DEMO_KEY)


@dataclass(frozen=True)
class DateTimeShift:
    """A patient's offset: `days` whole days (rounded down) plus `seconds` in [0, 86400).

    `Pseudonymizer.datetime_shift` makes one with days <= -2 and seconds in [3600, 82800], so
    the offset is always backwards, at least 25 hours, never a whole day, and every time of
    day moves by at least an hour. How each DICOM value is moved: imaging/deid/timeshift.py.
    """

    days: int
    seconds: int

    def __post_init__(self):
        if not 0 <= self.seconds < DAY_SECONDS:
            raise ValueError("seconds must be in [0, 86400)")

    @property
    def offset(self) -> dt.timedelta:
        return dt.timedelta(days=self.days, seconds=self.seconds)


@functools.lru_cache(maxsize=8)
def _keyed(key: bytes):
    """HMAC-SHA256 with `key` and nothing hashed yet: `Pseudonymizer.digest` copies it per message."""
    return hmac.new(key, b"", hashlib.sha256)


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
        mac = _keyed(self._key).copy()  # the key's pads hashed once (HMAC's own copy), not for every value
        mac.update(message)
        return mac.digest()

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
        """Whole-day part of the patient's offset, in [-MAX_DATE_SHIFT_DAYS, -MIN_DATE_SHIFT_DAYS].

        This is what a date with no time of day moves by (DICOM DA with no paired TM, and every
        clinical date under the policy's `shift_date`): the date of its midnight after the full
        offset. A DICOM date-time moves by the full offset (`datetime_shift`), so its date lands
        on `real + date_shift_days` or, late in the day, the day after.
        """
        span = MAX_DATE_SHIFT_DAYS - MIN_DATE_SHIFT_DAYS + 1
        value = int.from_bytes(self.digest("date-shift", issuer.strip(), patient_id.strip())[:8], "big")
        return -(MIN_DATE_SHIFT_DAYS + value % span)

    def time_shift_seconds(self, issuer: str, patient_id: str) -> int:
        """Sub-day part of the patient's offset, in [MIN_TIME_SHIFT_SECONDS, MAX_TIME_SHIFT_SECONDS]."""
        span = MAX_TIME_SHIFT_SECONDS - MIN_TIME_SHIFT_SECONDS + 1
        value = int.from_bytes(self.digest("time-shift", issuer.strip(), patient_id.strip())[:8], "big")
        return MIN_TIME_SHIFT_SECONDS + value % span

    def datetime_shift(self, issuer: str, patient_id: str) -> DateTimeShift:
        """The patient's offset for every date and time: `date_shift_days` days plus `time_shift_seconds`.

        Never a whole number of days, always backwards by at least 25 hours, the same for all
        of the patient's files. `issuer` is the patient id's namespace (imaging.issuers).
        """
        return DateTimeShift(self.date_shift_days(issuer, patient_id), self.time_shift_seconds(issuer, patient_id))

    def datetime_offset(self, issuer: str, patient_id: str) -> dt.timedelta:
        """`datetime_shift` as a timedelta: `real date-time + offset` is the published date-time."""
        return self.datetime_shift(issuer, patient_id).offset

    def token(self, label: str, *parts: str, length: int = 20) -> str:
        """Opaque lower-case hex token for any other value (for example a partition's folder name)."""
        return self.digest(label, *parts).hex()[:length]
