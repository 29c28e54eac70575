"""Test approvers: real Ed25519 OpenSSH keys, an allowed-signers file listing them, and signing as a reviewer does.

`conftest.py` makes two for the session (`IMAGING_APPROVERS` names their allowed-signers file, and
`IMAGING_TEST_APPROVER_KEYS` their private keys, for the processes the tests start), so every run that
publishes goes through two signed approvals, as production does.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from imaging.governance.signing import NAMESPACE

PRINCIPALS = ("reviewer-a@test", "reviewer-b@test")


@dataclass(frozen=True)
class Approvers:
    signers: Path  # the allowed-signers file
    keys: dict  # principal -> private key file


def write_key(path: Path, seed: str | None = None) -> str:
    """An Ed25519 OpenSSH private key at `path` (and `.pub`): new, or derived from `seed`; returns its public line."""
    key = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed.encode()).digest()) if seed \
        else Ed25519PrivateKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    line = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    Path(f"{path}.pub").write_text(line + "\n")
    return line


def make_approvers(folder: Path, principals=PRINCIPALS, seeded: bool = False) -> Approvers:
    """Keys and their allowed-signers file. `seeded`: the same keys in every process (the session's, so a
    world one test worker built and approved reviews the same on another)."""
    keys, lines = {}, []
    for number, principal in enumerate(principals, start=1):
        keys[principal] = folder / f"approver-{number}"
        seed = f"imaging test approver {principal}" if seeded else None
        lines.append(f'{principal} namespaces="{NAMESPACE}" {write_key(keys[principal], seed)}\n')
    signers = folder / "allowed_signers"
    signers.write_text("".join(lines))
    return Approvers(signers, keys)


def session_keys() -> list[str]:
    """The session approvers' private keys, from the environment conftest set (inherited by subprocesses)."""
    return [k for k in os.environ.get("IMAGING_TEST_APPROVER_KEYS", "").split(os.pathsep) if k]


def approve_all(held: str, keys=None, note: str = "approved by the test suite") -> None:
    """Sign an approval of a held release with each key (default: the session's two)."""
    from imaging.governance.review import sign_decision

    for key in keys if keys is not None else session_keys():
        sign_decision(held, "approve", str(key), note)
