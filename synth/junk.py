"""The deliberately broken files a landing zone also holds: notes, truncated and fake DICOM.

Each is built so that a reader which trusts names or magic numbers fails loudly.
"""

from __future__ import annotations

import numpy as np


def notes_bytes(partition: str) -> bytes:
    """A text note left among the images: not DICOM at all."""
    return f"Export notes for {partition}\nOperator reminder: re-scan if quality < 50.\n".encode()


def truncated_bytes(part10: bytes) -> bytes:
    """A real file cut inside OtherPatientIDsSequence, in the middle of the patient header.

    That sequence is written with undefined length, which pydicom parses eagerly, so the
    cut makes `dcmread` raise instead of returning a silently partial dataset."""
    marker = b"\x10\x00\x02\x10SQ\x00\x00\xff\xff\xff\xff"
    at = part10.index(marker)
    return part10[: at + len(marker) + 8 + 8 + 3]  # item header, element header, 3 value bytes


def garbage_bytes(seed: int) -> bytes:
    """Preamble + DICM, then noise behind an undefined-length sequence header, so readers
    that trust the magic number alone fail (pydicom runs off the end of the sequence)."""
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, size=int(rng.integers(200, 600)), dtype=np.uint8).tobytes()
    return b"\x00" * 128 + b"DICM" + b"\x08\x00\x15\x11SQ\x00\x00\xff\xff\xff\xff" + noise
