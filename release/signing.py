"""Maintainer keys of releases: an Ed25519 key pair made by `hotshape keygen`, and the signer of release.json."""

from __future__ import annotations

import base64
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from release.integrity import fingerprint

PRIVATE_KEY_FILE = "release-signing.key"
PUBLIC_KEY_FILE = "release-signing.pub"


class SigningError(ValueError):
    """A signing key cannot be made or used; the message names the file."""


@dataclass
class Signer:
    """An Ed25519 private key and its public key in PEM; signs release.json's bytes."""

    key: Ed25519PrivateKey
    public_pem: bytes

    def sign(self, body: bytes) -> bytes:
        """The release.sig bytes for release.json bytes `body`: base64 of the signature and a newline."""
        return base64.b64encode(self.key.sign(body)) + b"\n"

    @property
    def fingerprint(self) -> str:
        """The public key's fingerprint (integrity.fingerprint)."""
        return fingerprint(self.public_pem)


def _public_pem(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def keygen(out: str | Path) -> dict:
    """A new key pair in `out`: the private key (mode 0600) and the public key; their paths and fingerprint."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    priv, pub = out / PRIVATE_KEY_FILE, out / PUBLIC_KEY_FILE
    for p in (priv, pub):
        if os.path.lexists(p):
            raise SigningError(f"{p}: already exists (a key is never overwritten)")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    # O_EXCL with mode 0600: the private key is never readable by others, not even for an instant.
    fd = os.open(priv, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    pub.write_bytes(_public_pem(key))
    return {"private_key": str(priv), "public_key": str(pub), "fingerprint": fingerprint(_public_pem(key))}


def load_signing_key(path: str | Path) -> Signer:
    """The signer of a private key file written by keygen; a SigningError naming the file otherwise."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        data = path.read_bytes()
    except OSError as exc:
        raise SigningError(f"{path}: cannot read the signing key ({exc.strerror})") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SigningError(f"{path}: the signing key is readable by others (chmod 600 it)")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"{path}: not an unencrypted PEM private key ({exc})") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{path}: not an Ed25519 private key")
    return Signer(key, _public_pem(key))
