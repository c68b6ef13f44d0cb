"""Release integrity on real releases: `hotshape verify`, signing keys, and the readers of eval, score and drift."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernels_eval.harness.release_view import ReleaseViewError, read_release_view
from release.bundle import ReleaseError, ReleaseIntegrityError, read_release
from release.integrity import SUMS_FILE, info_digest, json_bytes, sha256sums

REPO = Path(__file__).resolve().parents[2]
WEIGHTS = "public/weights/v1.parquet"


def hotshape(*args, check_rc: int | None = None) -> subprocess.CompletedProcess:
    """`hotshape ARGS` in its own process."""
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    if check_rc is not None:
        assert done.returncode == check_rc, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """A maintainer's key pair made by `hotshape keygen`."""
    out = tmp_path_factory.mktemp("keys")
    hotshape("keygen", "--out", out, check_rc=0)
    return out / "release-signing.key", out / "release-signing.pub"


@pytest.fixture(scope="module")
def signed(examples_dir, keys, tmp_path_factory):
    """The example build, signed with the maintainer's key."""
    out = tmp_path_factory.mktemp("signed") / "rel"
    hotshape("build", "--traces", examples_dir / "traces", "--fleet", examples_dir / "fleet.yaml", "--out", out,
             "--name", "examples", "--signing-key", keys[0], check_rc=0)
    return out


def _copy(release: Path, to: Path) -> Path:
    shutil.copytree(release, to)
    return to


def _other_weights(release: Path) -> bytes:
    """The release's v1 weights with all weight on its first problem: a forged weights file."""
    table = pq.read_table(release / WEIGHTS)
    weights = [1.0] + [0.0] * (table.num_rows - 1)
    for col in ("weight", "weight_prefill", "weight_decode", "weight_mixed"):
        table = table.set_column(table.schema.get_field_index(col), col, pa.array(weights, pa.float64()))
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _reseal(release: Path) -> None:
    """Recompute release.json's sha256s and digest after an edit, as anyone can (no key needed)."""
    info = json.loads((release / "release.json").read_bytes())
    info["files"] = {rel: hashlib.sha256((release / rel).read_bytes()).hexdigest() for rel in info["files"]}
    info["digest"] = info_digest(info)
    (release / "release.json").write_bytes(json_bytes(info))
    _resum(release)


def _resum(release: Path) -> None:
    """Rewrite SHA256SUMS from release.json, as anyone can."""
    raw = (release / "release.json").read_bytes()
    (release / SUMS_FILE).write_bytes(sha256sums(json.loads(raw)["files"], raw))


def test_keygen_writes_a_private_key_only_its_owner_reads(keys):
    private, public = keys
    assert private.stat().st_mode & 0o777 == 0o600
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    again = hotshape("keygen", "--out", private.parent)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_verify_a_signed_release_names_the_key_and_whether_it_was_pinned(signed, keys):
    done = hotshape("verify", signed, "--public-key", keys[1], check_rc=0)
    fp = hotshape("keygen", "--out", signed.parent / "k2").stdout.split(": ")[-1].strip()
    assert done.stdout.count("\n") == 1 and "(the pinned key)" in done.stdout and "ed25519:" in done.stdout
    assert done.stdout.startswith(f"{signed}: SIGNED, verified: ")
    assert json.loads(hotshape("verify", signed, "--json", check_rc=0).stdout)["signed"] is True
    shipped = hotshape("verify", signed, check_rc=0).stdout
    assert "shipped in the release" in shipped and fp not in shipped


def test_signed_builds_are_byte_for_byte_deterministic(signed, examples_dir, keys, tmp_path):
    hotshape("build", "--traces", examples_dir / "traces", "--fleet", examples_dir / "fleet.yaml", "--out",
             tmp_path / "rel", "--name", "examples", "--signing-key", keys[0], check_rc=0)
    shas = lambda root: {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
                         for p in sorted(root.rglob("*")) if p.is_file()}
    assert shas(tmp_path / "rel") == shas(signed)
    assert {"release.sig", "release.pub"} <= set(shas(signed))


def test_an_edited_weights_file_is_refused_by_verify_eval_score_and_drift(signed, tmp_path):
    r = _copy(signed, tmp_path / "r")
    (r / WEIGHTS).write_bytes(_other_weights(r))
    done = hotshape("verify", r, check_rc=2)
    assert f"{WEIGHTS}: sha256 does not match" in done.stderr and done.stderr.count("\n") == 1
    with pytest.raises(ReleaseViewError, match="weights/v1.parquet: sha256"):
        read_release_view(r)
    with pytest.raises(ReleaseIntegrityError, match="weights/v1.parquet: sha256"):
        read_release(r)
    drift = hotshape("drift", r, r)
    assert drift.returncode == 2 and "weights/v1.parquet: sha256" in drift.stderr


def test_a_resealed_edit_fails_the_signature_for_every_reader(signed, keys, tmp_path):
    r = _copy(signed, tmp_path / "r")
    (r / WEIGHTS).write_bytes(_other_weights(r))
    _reseal(r)
    for args in ((), ("--public-key", keys[1])):
        done = hotshape("verify", r, *args, check_rc=2)
        assert "release.sig: not a valid signature of release.json" in done.stderr
    with pytest.raises(ReleaseViewError, match="release.sig"):
        read_release_view(r)
    with pytest.raises(ReleaseIntegrityError, match="release.sig"):
        read_release(r)


def test_a_resealed_edit_signed_by_another_key_is_caught_by_the_pinned_key_only(signed, keys, tmp_path):
    r = _copy(signed, tmp_path / "r")
    (r / WEIGHTS).write_bytes(_other_weights(r))
    _reseal(r)
    (r / "release.sig").unlink()
    (r / "release.pub").unlink()
    hotshape("keygen", "--out", tmp_path / "forger", check_rc=0)
    # The forger re-signs by refreshing nothing: sign the resealed release.json with their own key.
    from release.signing import load_signing_key

    forger = load_signing_key(tmp_path / "forger" / "release-signing.key")
    (r / "release.sig").write_bytes(forger.sign((r / "release.json").read_bytes()))
    (r / "release.pub").write_bytes(forger.public_pem)
    consistent = hotshape("verify", r, check_rc=0).stdout
    assert forger.fingerprint in consistent and "pin the maintainer's key" in consistent
    pinned = hotshape("verify", r, "--public-key", keys[1], check_rc=2)
    assert "not a valid signature" in pinned.stderr and forger.fingerprint in pinned.stderr


def test_an_unsigned_release_is_said_to_be_unsigned(atrex_dir, keys, tmp_path):
    hotshape("import-atrex", atrex_dir, "--out", tmp_path / "a", check_rc=0)
    done = hotshape("verify", tmp_path / "a", check_rc=2)
    assert "unsigned" in done.stderr and "not trusted" in done.stderr
    # Regression: the message said "not trusted" without saying how to accept an unsigned release.
    assert done.stderr.startswith(f"{tmp_path / 'a'}: UNSIGNED, not trusted: digest and ")
    assert f"hotshape verify {tmp_path / 'a'} --allow-unsigned" in done.stderr and done.stderr.count("\n") == 1
    accepted = hotshape("verify", tmp_path / "a", "--allow-unsigned", check_rc=0).stdout
    assert accepted.startswith(f"{tmp_path / 'a'}: UNSIGNED, accepted (--allow-unsigned)")
    as_json = json.loads(hotshape("verify", tmp_path / "a", "--allow-unsigned", "--json", check_rc=0).stdout)
    assert as_json["signed"] is False and as_json["ok"] is True
    # the card's first step names the flag
    assert "`hotshape verify RELEASE --allow-unsigned`" in (tmp_path / "a" / "README.md").read_text()
    pinned = hotshape("verify", tmp_path / "a", "--public-key", keys[1], check_rc=2)
    assert "release.sig: missing" in pinned.stderr
    assert "unsigned" in read_release_view(tmp_path / "a").integrity


def test_a_stripped_signature_is_unsigned_and_half_a_signature_is_refused(signed, keys, tmp_path):
    r = _copy(signed, tmp_path / "r")
    (r / "release.sig").unlink()
    with pytest.raises(ReleaseViewError, match="release.sig: missing"):
        read_release_view(r)
    (r / "release.pub").unlink()
    assert "unsigned" in hotshape("verify", r, check_rc=2).stderr
    assert "release.sig: missing" in hotshape("verify", r, "--public-key", keys[1], check_rc=2).stderr


def test_eval_reader_refuses_edits_it_used_to_miss(atrex_release, tmp_path):
    # Before: eval checked only the manifest's and roofline's sha256s. Now every file and the digest.
    r = _copy(atrex_release, tmp_path / "r")
    assert read_release_view(r).digest == json.loads((r / "release.json").read_bytes())["digest"]
    (r / WEIGHTS).write_bytes(_other_weights(r))
    with pytest.raises(ReleaseViewError, match="weights/v1.parquet"):
        read_release_view(r)
    r2 = _copy(atrex_release, tmp_path / "r2")
    (r2 / "public" / "extra.parquet").write_bytes(b"x")
    with pytest.raises(ReleaseViewError, match="public/extra.parquet: not listed"):
        read_release_view(r2)
    r3 = _copy(atrex_release, tmp_path / "r3")
    info = json.loads((r3 / "release.json").read_bytes())
    info["name"] = "renamed"
    (r3 / "release.json").write_bytes(json_bytes(info))
    with pytest.raises(ReleaseViewError, match="release.json: its digest"):
        read_release_view(r3)


def test_refresh_of_a_signed_release_needs_the_key_and_stays_signed(signed, keys, examples_dir, tmp_path):
    r = _copy(signed, tmp_path / "r")
    args = ("refresh", r, "--traces", examples_dir / "traces", "--fleet", examples_dir / "fleet.yaml")
    done = hotshape(*args, check_rc=2)
    assert "signed by ed25519:" in done.stderr and "--signing-key" in done.stderr
    hotshape(*args, "--signing-key", keys[0], check_rc=0)
    assert "(the pinned key)" in hotshape("verify", r, "--public-key", keys[1], check_rc=0).stdout
    assert read_release(r).versions == [1, 2]


def test_a_signing_key_others_can_read_is_refused(keys, examples_dir, tmp_path):
    loose = tmp_path / "loose.key"
    loose.write_bytes(keys[0].read_bytes())
    loose.chmod(0o644)
    done = hotshape("build", "--traces", examples_dir / "traces", "--fleet", examples_dir / "fleet.yaml",
                    "--out", tmp_path / "rel", "--signing-key", loose, check_rc=2)
    assert "readable by others" in done.stderr and not (tmp_path / "rel").exists()


def test_the_eval_reader_imports_no_polars():
    code = ("import sys\nfrom kernels_eval.harness.release_view import read_release_view\n"
            "import release.integrity\nprint(sorted(m for m in sys.modules if m.startswith('polars')))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_release_path_that_is_not_a_release_is_named(tmp_path):
    with pytest.raises(ReleaseError, match="no release.json"):
        read_release(tmp_path / "nothing")


def test_sha256sums_beside_release_json_passes_sha256sum_and_is_checked(signed, tmp_path):
    """SHA256SUMS lists every listed file and release.json as `sha256sum -c` reads it."""
    sums = (signed / "SHA256SUMS").read_text()
    names = [line.split("  ", 1)[1] for line in sums.splitlines()]
    assert names == sorted(names) and {"release.json", "README.md", WEIGHTS} <= set(names)
    assert not {"SHA256SUMS", "release.sig", "release.pub"} & set(names)
    if shutil.which("sha256sum"):
        done = subprocess.run(["sha256sum", "--strict", "-c", "SHA256SUMS"], cwd=signed, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    hotshape("verify", signed, check_rc=0)
    copy = _copy(signed, tmp_path / "edited")
    (copy / "SHA256SUMS").write_text(sums.replace(sums[:8], "00000000", 1))
    with pytest.raises(ReleaseIntegrityError, match="SHA256SUMS: does not match release.json"):
        read_release(copy)
