"""OpenSSH signatures of release decisions: the SSHSIG format, allowed-signers files, demo keys.

An approval (or rejection) is a short text signed with the approver's OpenSSH key in the namespace
`imaging-release`, exactly as `ssh-keygen -Y sign -n imaging-release -f KEY` signs it, and verified
against an OpenSSH allowed-signers file (`principal namespaces="imaging-release" ssh-ed25519 AAAA...`),
as `ssh-keygen -Y verify` does. The format (OpenSSH's PROTOCOL.sshsig) is written here with
`cryptography`, so signing and verifying need no system tool; Ed25519 keys are signed here, and a
passphrase-protected key is handed to `ssh-keygen -Y sign` itself when it is installed (it asks for the
passphrase). The tests check both directions against the real `ssh-keygen`.

Demo keys: `platform/demo.sh` approves with two Ed25519 keys derived from public seeds
(`demo_private_key`). Anybody can recreate them, like the demo pseudonym key, so their fingerprints
(`DEMO_FINGERPRINTS`) are flagged wherever they appear, and an approval made with one counts only for
a release made under the demo pseudonym key.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

NAMESPACE = "imaging-release"
_MAGIC = b"SSHSIG"
_VERSION = 1
_ARMOUR_BEGIN, _ARMOUR_END = "-----BEGIN SSH SIGNATURE-----", "-----END SSH SIGNATURE-----"
_ED25519 = b"ssh-ed25519"
_HASHES = {"sha512": hashlib.sha512, "sha256": hashlib.sha256}


class SignatureError(ValueError):
    """A signature that does not verify, a key that cannot sign, or an unreadable allowed-signers file."""


# --- SSH wire format -------------------------------------------------------------------------------------

def _string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def string(self) -> bytes:
        if self.at + 4 > len(self.data):
            raise SignatureError("truncated signature")
        size = int.from_bytes(self.data[self.at:self.at + 4], "big")
        self.at += 4
        if self.at + size > len(self.data):
            raise SignatureError("truncated signature")
        out = self.data[self.at:self.at + size]
        self.at += size
        return out

    def uint32(self) -> int:
        if self.at + 4 > len(self.data):
            raise SignatureError("truncated signature")
        self.at += 4
        return int.from_bytes(self.data[self.at - 4:self.at], "big")


def _ed25519_blob(public: Ed25519PublicKey) -> bytes:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return _string(_ED25519) + _string(raw)


def fingerprint(blob: bytes) -> str:
    """OpenSSH's fingerprint of a public key blob: `SHA256:` and unpadded base64 (as `ssh-keygen -l` prints)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def public_key_line(blob: bytes) -> str:
    """`ssh-ed25519 AAAA...`: the public key as an allowed-signers or .pub line has it."""
    return f"{_key_type(blob)} {base64.b64encode(blob).decode()}"


def _key_type(blob: bytes) -> str:
    return _Reader(blob).string().decode("ascii", "replace")


def _signed_data(namespace: str, hash_name: str, message: bytes) -> bytes:
    return (_MAGIC + _string(namespace.encode()) + _string(b"") + _string(hash_name.encode())
            + _string(_HASHES[hash_name](message).digest()))


def _armour(blob: bytes) -> str:
    text = base64.b64encode(blob).decode()
    return "\n".join([_ARMOUR_BEGIN, *(text[i:i + 70] for i in range(0, len(text), 70)), _ARMOUR_END]) + "\n"


@dataclass(frozen=True)
class Signature:
    """A parsed SSHSIG signature: who signed (public key blob), in which namespace, how."""

    public_key: bytes  # SSH public key blob
    namespace: str
    hash_algorithm: str
    signature: bytes  # SSH signature blob: string key type, string raw signature

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)


def parse_signature(armoured: str) -> Signature:
    lines = [line.strip() for line in armoured.strip().splitlines()]
    if len(lines) < 3 or lines[0] != _ARMOUR_BEGIN or lines[-1] != _ARMOUR_END:
        raise SignatureError("not an armoured SSH signature")
    try:
        blob = base64.b64decode("".join(lines[1:-1]), validate=True)
    except ValueError as error:
        raise SignatureError("not an armoured SSH signature") from error
    if not blob.startswith(_MAGIC):
        raise SignatureError("not an SSHSIG signature")
    reader = _Reader(blob[len(_MAGIC):])
    if reader.uint32() != _VERSION:
        raise SignatureError("unsupported SSHSIG version")
    public, namespace, _reserved = reader.string(), reader.string(), reader.string()
    hash_name, signature = reader.string(), reader.string()
    return Signature(public, namespace.decode("utf-8", "replace"), hash_name.decode("ascii", "replace"), signature)


def verify_signature(message: bytes, armoured: str, namespace: str = NAMESPACE) -> Signature:
    """Check that `armoured` signs `message` in `namespace` with the key it names; returns it parsed.

    Who that key belongs to is the allowed-signers file's business (`AllowedSigners.principal_of`).
    """
    sig = parse_signature(armoured)
    if sig.namespace != namespace:
        raise SignatureError(f"signed in namespace {sig.namespace!r}, not {namespace!r}")
    if sig.hash_algorithm not in _HASHES:
        raise SignatureError(f"unsupported hash {sig.hash_algorithm!r}")
    key = _Reader(sig.public_key)
    if key.string() != _ED25519:
        raise SignatureError(f"unsupported key type {_key_type(sig.public_key)!r} (Ed25519 keys only)")
    public = Ed25519PublicKey.from_public_bytes(key.string())
    inner = _Reader(sig.signature)
    if inner.string() != _ED25519:
        raise SignatureError("the signature's type does not match its key")
    try:
        public.verify(inner.string(), _signed_data(namespace, sig.hash_algorithm, message))
    except InvalidSignature as error:
        raise SignatureError("the signature does not match the signed text") from error
    return sig


# --- Private keys ----------------------------------------------------------------------------------------

def _load_private(data: bytes) -> Ed25519PrivateKey:
    key = serialization.load_ssh_private_key(data, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError("only Ed25519 keys can sign approvals (ssh-keygen -t ed25519)")
    return key


def _is_encrypted(data: bytes) -> bool:
    try:
        serialization.load_ssh_private_key(data, password=None)
    except (TypeError, ValueError) as error:  # "Key is password-protected."
        return "password" in str(error).lower() or "encrypted" in str(error).lower()
    except UnsupportedAlgorithm:  # an encrypted key needs bcrypt here; ssh-keygen can open it
        return True
    return False


def sign(message: bytes, key_path: str | os.PathLike, namespace: str = NAMESPACE) -> str:
    """An armoured SSHSIG of `message` with the OpenSSH private key at `key_path` (sha512, as ssh-keygen).

    A passphrase-protected key is signed by `ssh-keygen -Y sign` (which asks for the passphrase).
    """
    path = Path(key_path).expanduser()
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SignatureError(f"cannot read the private key: {error.strerror}") from error
    if _is_encrypted(data):
        return _sign_with_ssh_keygen(message, path, namespace)
    try:
        key = _load_private(data)
    except ValueError as error:
        raise SignatureError(f"not an OpenSSH private key ({error})") from error
    blob = _ed25519_blob(key.public_key())
    raw = key.sign(_signed_data(namespace, "sha512", message))
    body = (_MAGIC + _VERSION.to_bytes(4, "big") + _string(blob) + _string(namespace.encode()) + _string(b"")
            + _string(b"sha512") + _string(_string(_ED25519) + _string(raw)))
    return _armour(body)


def _sign_with_ssh_keygen(message: bytes, path: Path, namespace: str) -> str:
    tool = shutil.which("ssh-keygen")
    if tool is None:
        raise SignatureError("the key is passphrase-protected and ssh-keygen is not installed to open it")
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp, "message")
        text.write_bytes(message)
        done = subprocess.run([tool, "-Y", "sign", "-n", namespace, "-f", str(path), str(text)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise SignatureError(f"ssh-keygen could not sign: {done.stderr.strip()}")
        return Path(tmp, "message.sig").read_text()


def public_key_of(key_path: str | os.PathLike) -> bytes:
    """The public key blob of a private key (an unencrypted one, or its `.pub` beside it)."""
    path = Path(key_path).expanduser()
    data = path.read_bytes()
    if not _is_encrypted(data):
        return _ed25519_blob(_load_private(data).public_key())
    pub = Path(f"{path}.pub")
    if not pub.exists():
        raise SignatureError("the key is passphrase-protected and has no .pub file beside it")
    return base64.b64decode(pub.read_text().split()[1])


# --- Allowed signers ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AllowedSigner:
    """One line of an allowed-signers file: principals, the namespaces they may sign, their key."""

    principals: tuple[str, ...]
    namespaces: tuple[str, ...] | None  # None: every namespace (no `namespaces=` option)
    key: bytes  # SSH public key blob
    line: int

    @property
    def principal(self) -> str:
        """The name an approval is recorded under: the line's first principal."""
        return self.principals[0]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)


@dataclass(frozen=True)
class AllowedSigners:
    source: str
    signers: tuple[AllowedSigner, ...]

    def principal_of(self, key: bytes, namespace: str = NAMESPACE) -> AllowedSigner | None:
        """The entry that lists this key for this namespace, or None (an unlisted key)."""
        for signer in self.signers:
            if signer.key == key and (signer.namespaces is None or namespace in signer.namespaces):
                return signer
        return None


def _split_options(rest: str) -> tuple[str, str]:
    """Split `opt1,opt2="a,b" keytype base64` into the options text and the key text."""
    quoted, at = False, 0
    while at < len(rest):
        char = rest[at]
        if char == '"':
            quoted = not quoted
        elif char in " \t" and not quoted:
            break
        at += 1
    return rest[:at], rest[at:].strip()


def parse_allowed_signers(text: str, source: str = "allowed signers") -> AllowedSigners:
    """Parse OpenSSH's allowed-signers format; `namespaces=` is honoured, other options are refused."""
    signers, problems = [], []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        principals, _, rest = line.partition(" ")
        rest = rest.strip()
        namespaces = None
        if rest and not rest.startswith(("ssh-", "ecdsa-", "sk-")):
            options, rest = _split_options(rest)
            for option in _split_top(options):
                name, _, value = option.partition("=")
                if name.lower() == "namespaces":
                    namespaces = tuple(v.strip() for v in value.strip('"').split(",") if v.strip())
                else:
                    problems.append(f"{source} line {number}: option {name!r} is not supported")
        parts = rest.split()
        if len(parts) < 2:
            problems.append(f"{source} line {number}: needs 'principals [options] keytype base64-key'")
            continue
        try:
            key = base64.b64decode(parts[1], validate=True)
        except ValueError:
            problems.append(f"{source} line {number}: the key is not base64")
            continue
        if _key_type(key) != parts[0]:
            problems.append(f"{source} line {number}: the key is not of type {parts[0]}")
            continue
        names = tuple(p for p in principals.split(",") if p)
        if any(c in p for p in names for c in "*?!"):
            problems.append(f"{source} line {number}: principal patterns are not supported; name each approver")
            continue
        signers.append(AllowedSigner(names, namespaces, key, number))
    if problems:
        raise SignatureError("; ".join(problems))
    return AllowedSigners(source, tuple(signers))


def _split_top(options: str) -> list[str]:
    out, current, quoted = [], "", False
    for char in options:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            out.append(current)
            current = ""
        else:
            current += char
    return [o for o in out + [current] if o]


def load_allowed_signers(path: str | os.PathLike) -> AllowedSigners:
    """The allowed-signers file at `path`; a missing file lists nobody (nothing can be approved)."""
    path = Path(path)
    if not path.exists():
        return AllowedSigners(str(path), ())
    return parse_allowed_signers(path.read_text(encoding="utf-8"), source=path.name)


# --- Demo keys -------------------------------------------------------------------------------------------

def demo_private_key(number: int) -> Ed25519PrivateKey:
    """Demo approver key 1 or 2: derived from a public seed, so anybody can make it. Never for real releases."""
    seed = hashlib.sha256(f"imaging-release demo approver {number}: public, never for real approvals".encode())
    return Ed25519PrivateKey.from_private_bytes(seed.digest())


DEMO_APPROVERS = ("demo-approver-1", "demo-approver-2")
DEMO_FINGERPRINTS = frozenset(fingerprint(_ed25519_blob(demo_private_key(n).public_key())) for n in (1, 2))


def is_demo_key(fp: str) -> bool:
    return fp in DEMO_FINGERPRINTS


def write_demo_keys(folder: str | os.PathLike) -> Path:
    """Write the two demo keys (`demo-approver-N`, `.pub`) and an allowed-signers file listing them into
    `folder`; returns the allowed-signers file's path (what IMAGING_APPROVERS names)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for number, principal in enumerate(DEMO_APPROVERS, start=1):
        key = demo_private_key(number)
        private = folder / principal
        if not private.exists():
            private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                  serialization.NoEncryption()))
            private.chmod(0o600)  # ssh-keygen refuses a private key others can read
        line = public_key_line(_ed25519_blob(key.public_key()))
        Path(f"{private}.pub").write_text(f"{line} {principal}\n")
        lines.append(f'{principal} namespaces="{NAMESPACE}" {line}\n')
    signers = folder / "allowed_signers"
    signers.write_text("# DEMO approver keys (platform/demo.sh): public seeds, never for real releases\n"
                       + "".join(lines))
    return signers
