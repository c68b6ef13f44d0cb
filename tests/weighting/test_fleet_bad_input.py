"""fleet.yaml from someone else: nothing outside the trace root is listed or read, and every bad file is one line
naming the file (and the entry) — a glob that climbs out, a link out of the root, a missing root, a file nested
200k levels deep, a file that is not UTF-8 or is far too large."""

from __future__ import annotations

import os

import pytest

from conftest import write_fleet
from weighting import fleet as fleet_module
from weighting.fleet import FleetError, load_fleet

ACC = {"H200"}
SOURCE = "hta/triton_example/triton_example.json.gz"


@pytest.fixture
def layout(tmp_path, public_traces):
    """A trace root beside an `outside` folder, each holding a real trace."""
    data = (public_traces / SOURCE).read_bytes()
    for rel in ("root/a/one.json.gz", "outside/secret.json.gz"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data + rel.encode())
    return tmp_path


def fleet_file(tmp_path, traces):
    deployment = {"id": "chat", "accelerator": "H200", "card_hours": 10, "traces": traces}
    return write_fleet(tmp_path / "fleet.yaml", [deployment])


@pytest.mark.parametrize("glob", ["../outside/*.json.gz", "a/../../outside/*.json.gz", "/etc/*",
                                  "../../../../etc/*", "..\\outside\\*.json.gz", "file:///etc/*", "~/x/*.json.gz"])
def test_a_glob_that_leaves_the_root_is_refused_naming_the_entry(layout, glob, monkeypatch):
    listed = []
    real_glob = type(layout).glob
    monkeypatch.setattr(type(layout), "glob", lambda self, p: listed.append(p) or real_glob(self, p))
    with pytest.raises(FleetError) as info:
        load_fleet(fleet_file(layout, [glob]), layout / "root", accelerators=ACC)
    message = str(info.value)
    assert "\n" not in message and "fleet.yaml" in message and "'chat'" in message and repr(glob) in message
    assert "leaves the trace root" in message
    assert listed == []  # refused before anything was listed


def test_a_link_out_of_the_root_is_refused_and_never_read(layout):
    (layout / "root/a/link.json.gz").symlink_to(layout / "outside/secret.json.gz")
    with pytest.raises(FleetError, match=r"'chat'.*a/link.json.gz.*outside the trace root"):
        load_fleet(fleet_file(layout, ["a/*.json.gz"]), layout / "root", accelerators=ACC)
    (layout / "root/out").symlink_to(layout / "outside", target_is_directory=True)
    with pytest.raises(FleetError, match=r"out/secret.json.gz.*outside the trace root"):
        load_fleet(fleet_file(layout, ["out/*.json.gz"]), layout / "root", accelerators=ACC)


def test_links_inside_the_root_are_followed_and_links_out_left_unlisted(layout):
    (layout / "root/b").mkdir()
    (layout / "root/b/alias.json.gz").symlink_to(layout / "root/a/one.json.gz")
    (layout / "root/a/link.json.gz").symlink_to(layout / "outside/secret.json.gz")
    fleet = load_fleet(fleet_file(layout, ["a/one.json.gz", "b/*.json.gz"]), layout / "root", accelerators=ACC)
    assert fleet.deployment("chat").paths == ("a/one.json.gz", "b/alias.json.gz")
    assert fleet.unclaimed == ()  # the link out is neither claimed nor listed as a trace of the root


def test_an_fsspec_root_keeps_globs_inside_its_prefix(layout):
    pytest.importorskip("fsspec")
    url = f"file://{layout / 'root'}"
    fleet = load_fleet(fleet_file(layout, ["a/*.json.gz"]), url, accelerators=ACC)
    assert fleet.deployment("chat").paths == ("a/one.json.gz",)
    with pytest.raises(FleetError, match="leaves the trace root"):
        load_fleet(fleet_file(layout, ["../outside/*.json.gz"]), url, accelerators=ACC)
    with pytest.raises(FleetError, match=r"the trace root is not a folder"):
        load_fleet(fleet_file(layout, ["a/*.json.gz"]), f"file://{layout / 'nowhere'}", accelerators=ACC)


def test_a_missing_root_is_blamed_not_the_first_glob(layout):
    with pytest.raises(FleetError) as info:
        load_fleet(fleet_file(layout, ["a/*.json.gz"]), layout / "nowhere", accelerators=ACC)
    assert str(info.value).startswith(f"{layout / 'nowhere'}: the trace root does not exist")
    (layout / "afile").write_text("x")
    with pytest.raises(FleetError, match="the trace root is not a folder"):
        load_fleet(fleet_file(layout, ["a/*.json.gz"]), layout / "afile", accelerators=ACC)


@pytest.mark.parametrize("depth", [200_000, 5_000])
def test_a_fleet_nested_deeply_is_one_line_naming_the_file(tmp_path, depth):
    path = tmp_path / "deep.yaml"
    path.write_text("deployments: " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(FleetError) as info:
        load_fleet(path, tmp_path, accelerators=ACC)
    assert str(info.value) == f"{path}: nested too deeply to be a fleet file"


def test_a_fleet_that_is_not_text_too_large_or_missing_is_named(tmp_path, monkeypatch):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"deployments: \xff\xfe\n")
    with pytest.raises(FleetError, match=r"binary.yaml: not UTF-8 text"):
        load_fleet(binary, tmp_path, accelerators=ACC)
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 20)
    monkeypatch.setattr(fleet_module, "MAX_FLEET_BYTES", 100)
    with pytest.raises(FleetError, match=r"big.yaml: 200 bytes, over the 100"):
        load_fleet(big, tmp_path, accelerators=ACC)
    with pytest.raises(FleetError, match=r"nope.yaml: no such fleet file"):
        load_fleet(tmp_path / "nope.yaml", tmp_path, accelerators=ACC)
    assert not os.path.exists(tmp_path / "nope.yaml")


def test_paths_under_the_root_resolve_as_path_resolve_resolves_them(layout):
    """load_fleet resolves each folder once and each file by its folder (fleet._Resolved): on a root of file links,
    folder links in and out, a link to a link and a folder reached through a link, the same real path as
    Path.resolve, file by file; and a file through a folder link out of the root is still refused."""
    root = layout / "root"
    (root / "b/c").mkdir(parents=True)
    (root / "b/c/deep.json.gz").write_bytes(b"x")
    (root / "b/alias.json.gz").symlink_to(root / "a/one.json.gz")
    (root / "b/chain.json.gz").symlink_to(root / "b/alias.json.gz")
    (root / "b/rel.json.gz").symlink_to("../a/one.json.gz")
    (root / "inner").symlink_to(root / "b", target_is_directory=True)
    (root / "out").symlink_to(layout / "outside", target_is_directory=True)
    (root / "a/link.json.gz").symlink_to(layout / "outside/secret.json.gz")
    paths = sorted(p for p in root.glob("**/*") if p.is_file()) + sorted((root / "inner").glob("**/*"))
    resolved = fleet_module._Resolved()
    assert len(paths) >= 10 and [resolved(p) for p in paths] == [p.resolve() for p in paths]
    assert any(p.resolve().parent == (layout / "outside").resolve() for p in paths)  # the links out are among them
    fleet = load_fleet(fleet_file(layout, ["inner/c/*.json.gz", "b/*.json.gz"]), root, accelerators=ACC)
    assert fleet.deployment("chat").paths == ("b/alias.json.gz", "b/chain.json.gz", "b/rel.json.gz",
                                              "inner/c/deep.json.gz")
    with pytest.raises(FleetError, match=r"out/secret.json.gz.*outside the trace root"):
        load_fleet(fleet_file(layout, ["out/*.json.gz"]), root, accelerators=ACC)


def test_inside_read_once_a_fleet_is_read_once_and_its_error_stays(layout):
    """Within read_once (one run-pipeline), load_fleet with the same arguments returns the first fleet even after the
    file and the root changed (the command's fleet is the one it found); other arguments read again; outside, every
    call reads again. A bad fleet raises the same one-line error each time."""
    path = fleet_file(layout, ["a/*.json.gz"])
    with fleet_module.read_once():
        first = load_fleet(path, layout / "root", accelerators=ACC)
        (layout / "root/a/two.json.gz").write_bytes((layout / "root/a/one.json.gz").read_bytes() + b"2")
        assert load_fleet(path, layout / "root", accelerators=ACC) is first
        with fleet_module.read_once():  # nested: the outer one's memory
            assert load_fleet(path, layout / "root", accelerators=ACC) is first
        assert load_fleet(path, layout / "root", accelerators={"H200", "B200"}).deployment("chat").paths == (
            "a/one.json.gz", "a/two.json.gz")
        bad = fleet_file(layout / "root", ["../outside/*.json.gz"])
        errors = []
        for _ in range(2):
            with pytest.raises(FleetError, match="leaves the trace root") as info:
                load_fleet(bad, layout / "root", accelerators=ACC)
            errors.append(info.value)
        assert errors[0] is errors[1]
    assert first.deployment("chat").paths == ("a/one.json.gz",)
    assert load_fleet(path, layout / "root", accelerators=ACC).deployment("chat").paths == (
        "a/one.json.gz", "a/two.json.gz")
