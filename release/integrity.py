"""The one check of a release on disk: release.json's digest, every listed file's sha256, nothing unlisted,
and the Ed25519 signature when there is one. Standard library only (the signature check imports
`cryptography` when it is installed), so the evaluator imports it on machines without polars."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

RELEASE_JSON = "release.json"
SIGNATURE_FILE = "release.sig"
PUBLIC_KEY_FILE = "release.pub"
# Every file's sha256 in the layout `sha256sum -c SHA256SUMS` reads, derived from release.json (sha256sums()).
SUMS_FILE = "SHA256SUMS"
# Written first into a release being built and removed last: a run killed half way never verifies.
UNFINISHED_MARKER = ".unfinished"
FORMAT = "hotshape-release/1"
# Files of a release that release.json cannot list: itself, and the signature made over it.
ENVELOPE = (RELEASE_JSON, SIGNATURE_FILE, PUBLIC_KEY_FILE, SUMS_FILE)
# DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): the raw 32-byte key follows it.
_ED25519_SPKI = bytes.fromhex("302a300506032b6570032100")
# A refresh removes the version it replaced; a reader that was inside it reads the new one instead.
_ATTEMPTS = 5


class IntegrityError(ValueError):
    """A release is missing, unfinished, edited or badly signed; the message names the file and the problem."""


def json_bytes(value) -> bytes:
    """JSON bytes in the one layout a release uses: sorted keys, indent 2, final newline."""
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def sha256(data: bytes) -> str:
    """Hex sha256 of some bytes."""
    return hashlib.sha256(data).hexdigest()


def info_digest(info: dict) -> str:
    """The digest release.json carries: sha256 of the rest of itself in the release layout."""
    return sha256(json_bytes({k: v for k, v in info.items() if k != "digest"}))


def raw_public_key(pem: bytes, name: str = "public key") -> bytes:
    """The 32 raw bytes of an Ed25519 public key in PEM (SubjectPublicKeyInfo)."""
    lines = [ln.strip() for ln in pem.decode("ascii", "replace").splitlines()]
    try:
        start, end = lines.index("-----BEGIN PUBLIC KEY-----"), lines.index("-----END PUBLIC KEY-----")
        der = base64.b64decode("".join(lines[start + 1:end]), validate=True)
    except ValueError as exc:
        raise IntegrityError(f"{name}: not a PEM public key") from exc
    if len(der) != len(_ED25519_SPKI) + 32 or not der.startswith(_ED25519_SPKI):
        raise IntegrityError(f"{name}: not an Ed25519 public key")
    return der[len(_ED25519_SPKI):]


def sha256sums(listed: dict[str, str], release_json: bytes) -> bytes:
    """SHA256SUMS: `<sha256>  <path>` per file release.json lists, and release.json itself (the signature,
    made over release.json, covers the rest; a signature stripped or added leaves SHA256SUMS true)."""
    rows = dict(listed) | {RELEASE_JSON: sha256(release_json)}
    return "".join(f"{rows[name]}  {name}\n" for name in sorted(rows)).encode()


def fingerprint(pem: bytes, name: str = "public key") -> str:
    """Short name of an Ed25519 public key: 'ed25519:' and the first 32 hex digits of its raw bytes' sha256."""
    return "ed25519:" + sha256(raw_public_key(pem, name))[:32]


@dataclass
class Verified:
    """A release that passed the check: where it is, its release.json, every listed file's bytes, the signature."""

    path: Path
    root: Path  # the versioned directory the release path pointed to when it was read
    info: dict
    data: dict[str, bytes] = field(repr=False)
    signature: str  # "verified", "unsigned" or "not checked"
    key: str | None = None  # fingerprint of the key the signature was checked against
    pinned: bool = False

    def summary(self) -> str:
        """One line: what was checked and what the signature proves."""
        checked = f"digest and {len(self.data)} files verified"
        if self.signature == "unsigned":
            return f"{checked}; unsigned (no {SIGNATURE_FILE})"
        if self.signature == "not checked":
            return f"{checked}; signature by {self.key} not checked (the cryptography package is not installed)"
        whose = "the pinned key" if self.pinned else "the key shipped in the release: pin the maintainer's key to trust it"
        return f"{checked}; signature by {self.key} verified ({whose})"


def resolve(path: str | Path) -> Path:
    """The directory a release path stands for now (a release path is a symlink to a versioned directory)."""
    return Path(os.path.realpath(path))


def read_verified(path: str | Path, public_key: bytes | None = None) -> Verified:
    """The release at `path` once it passes the whole check; an IntegrityError naming the file otherwise.

    `public_key` (PEM) pins the signer: the release must then be signed by that key. Without it a
    signature present is checked against the shipped release.pub when `cryptography` is installed.
    """
    for attempt in range(_ATTEMPTS):
        root = resolve(path)
        try:
            return _verify(Path(path), root, public_key)
        except (IntegrityError, OSError) as exc:
            # The release moved to a new version while it was being read: read the new one.
            if attempt + 1 < _ATTEMPTS and resolve(path) != root:
                continue
            if isinstance(exc, IntegrityError):
                raise
            raise IntegrityError(f"{exc.filename or root}: cannot be read ({exc.strerror or exc})") from exc
    raise AssertionError("unreachable")


def _files_on_disk(root: Path) -> tuple[list[str], list[str]]:
    files, odd = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                odd.append(f"{rel}: a symlink (a release holds plain files only)")
            elif name in filenames and p.is_file():
                files.append(rel)
            elif name in filenames:
                odd.append(f"{rel}: not a plain file")
    return sorted(files), odd


def _load_info(root: Path) -> tuple[dict, bytes]:
    f = root / RELEASE_JSON
    try:
        raw = f.read_bytes()
    except FileNotFoundError as exc:
        raise IntegrityError(f"{f}: not a release (no {RELEASE_JSON})") from exc
    try:
        info = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IntegrityError(f"{f}: not valid JSON ({exc})") from exc
    if not isinstance(info, dict) or info.get("format") != FORMAT or not isinstance(info.get("files"), dict):
        raise IntegrityError(f"{f}: not a {FORMAT} release.json")
    if info.get("digest") != info_digest(info):
        raise IntegrityError(f"{f}: its digest does not match its content (corrupted or edited)")
    return info, raw


def load_info(path: str | Path) -> dict:
    """release.json of a release, its digest checked (the files are not read)."""
    return _load_info(resolve(path))[0]


def _verify(path: Path, root: Path, public_key: bytes | None) -> Verified:
    if (root / UNFINISHED_MARKER).exists():
        raise IntegrityError(f"{root}: unfinished (its writer stopped before completing it)")
    info, raw = _load_info(root)
    listed = info["files"]
    on_disk, problems = _files_on_disk(root)
    present = set(on_disk)
    problems += [f"{rel}: missing" for rel in sorted(set(listed) - present)]
    problems += [f"{rel}: not listed in release.json" for rel in on_disk if rel not in listed and rel not in ENVELOPE]
    data: dict[str, bytes] = {}
    for rel in sorted(set(listed) & present):
        data[rel] = (root / rel).read_bytes()
        if sha256(data[rel]) != listed[rel]:
            problems.append(f"{rel}: sha256 does not match release.json (corrupted or edited)")
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:4])})" if len(problems) > 1 else ""
        raise IntegrityError(f"{root}/{problems[0]}{more}")
    signature = _signature(root, raw, public_key, present)
    if SUMS_FILE in present:  # optional (releases before it lack it), but never stale
        if (root / SUMS_FILE).read_bytes() != sha256sums(listed, raw):
            raise IntegrityError(f"{root}/{SUMS_FILE}: does not match release.json (corrupted or edited)")
    return Verified(path=path, root=root, info=info, data=data, **signature)


def _signature(root: Path, raw: bytes, public_key: bytes | None, present: set[str]) -> dict:
    has_sig, has_pub = SIGNATURE_FILE in present, PUBLIC_KEY_FILE in present
    if has_sig != has_pub:
        lacking = PUBLIC_KEY_FILE if has_sig else SIGNATURE_FILE
        raise IntegrityError(f"{root / lacking}: missing ({SIGNATURE_FILE} and {PUBLIC_KEY_FILE} come together)")
    if not has_sig:
        if public_key is not None:
            raise IntegrityError(f"{root / SIGNATURE_FILE}: missing: the release is unsigned, "
                                 f"so it cannot be by the pinned key {fingerprint(public_key)}")
        return {"signature": "unsigned"}
    shipped = (root / PUBLIC_KEY_FILE).read_bytes()
    key = public_key if public_key is not None else shipped
    name = fingerprint(key, "pinned public key" if public_key is not None else str(root / PUBLIC_KEY_FILE))
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        if public_key is not None:
            raise IntegrityError("cannot check a pinned key: the cryptography package is not installed") from None
        return {"signature": "not checked", "key": name}
    try:
        sig = base64.b64decode((root / SIGNATURE_FILE).read_bytes().strip(), validate=True)
        Ed25519PublicKey.from_public_bytes(raw_public_key(key)).verify(sig, raw)
    except (InvalidSignature, ValueError) as exc:
        other = "" if public_key is None or shipped == public_key else \
            f"; {PUBLIC_KEY_FILE} is {fingerprint(shipped, str(root / PUBLIC_KEY_FILE))}"
        raise IntegrityError(f"{root / SIGNATURE_FILE}: not a valid signature of {RELEASE_JSON} by {name} "
                             f"(edited after signing, or signed by another key){other}") from exc
    return {"signature": "verified", "key": name, "pinned": public_key is not None}
