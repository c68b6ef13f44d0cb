"""fleet.yaml validation: each mistake is a clear error or warning naming the deployment and field."""

from __future__ import annotations

import warnings

import pytest

from conftest import write_fleet
from weighting import fleet as fleet_module
from weighting.fleet import FleetError, FleetWarning, load_fleet

ACC = {"H200", "H100", "H20", "B200", "MI300X", "XPU-A"}


@pytest.fixture
def root(tmp_path, public_traces):
    """A small trace root: two real trace files under two folders, plus a sidecar."""
    base = tmp_path / "root"
    for rel in ("a/one.json.gz", "a/two.json.gz", "b/three.json.gz"):
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_bytes((public_traces / "hta/triton_example/triton_example.json.gz").read_bytes() + rel.encode())
    (base / "a/execution_details.json").write_text("{}")
    return base


def dep(**kw):
    base = {"id": "chat", "accelerator": "H200", "card_hours": 10, "traces": ["a/*.json.gz"]}
    return {**base, **kw}


def load(tmp_path, root, deployments, **kw):
    return load_fleet(write_fleet(tmp_path / "fleet.yaml", deployments), root, accelerators=ACC, **kw)


def test_valid_fleet_resolves_globs_and_card_hours(tmp_path, root):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fleet = load(tmp_path, root, [dep(), dep(id="batch", cards=4, hours=2.5, card_hours=None, traces=["b/**/*.json.gz"])])
    assert fleet.deployment("chat").paths == ("a/one.json.gz", "a/two.json.gz")
    assert fleet.deployment("batch").card_hours == 10.0
    assert fleet.assignment() == {"a/one.json.gz": "chat", "a/two.json.gz": "chat", "b/three.json.gz": "batch"}


@pytest.mark.parametrize(
    "bad, pattern",
    [
        (dep(accelerator="A100"), r"deployment 'chat'.*unknown accelerator 'A100'.*'accelerator'"),
        ({k: v for k, v in dep().items() if k != "card_hours"}, r"deployment 'chat'.*missing field 'card_hours'"),
        (dep(card_hours=None, cards=4), r"deployment 'chat'.*'cards' needs 'hours'"),
        (dep(card_hours=-3), r"deployment 'chat'.card_hours must be a positive number"),
        (dep(card_hours=10, cards=4, hours=3), r"deployment 'chat'.*disagrees"),
        (dep(traces=["nope/*.json.gz"]), r"deployment 'chat'.*'traces' glob 'nope/\*.json.gz' matches nothing"),
        (dep(phase_mix={"prefill": 0.5, "decode": 0.4}), r"deployment 'chat'.phase_mix must sum to 1"),
        (dep(phase_mix={"warmup": 1.0}), r"deployment 'chat'.phase_mix: unknown phase 'warmup'"),
        (dep(traces=[]), r"deployment 'chat'.*'traces' must be a non-empty list"),
    ],
)
def test_invalid_deployment_errors_name_deployment_and_field(tmp_path, root, bad, pattern):
    bad = {k: v for k, v in bad.items() if v is not None}
    with pytest.raises(FleetError, match=pattern):
        load(tmp_path, root, [bad, dep(id="other", traces=["b/*.json.gz"])])


def test_trace_claimed_by_two_deployments(tmp_path, root):
    with pytest.raises(FleetError, match=r"a/one.json.gz.*claimed by deployments 'chat' and 'all'.*'traces'"):
        load(tmp_path, root, [dep(traces=["b/*.json.gz", "a/*.json.gz"]), dep(id="all", traces=["*/one.json.gz"])])


def test_duplicate_id(tmp_path, root):
    with pytest.raises(FleetError, match="'chat' appears twice"):
        load(tmp_path, root, [dep(), dep(traces=["b/*.json.gz"])])


def test_unclaimed_trace_warns_and_is_listed(tmp_path, root):
    with pytest.warns(FleetWarning, match=r"1 trace\(s\).*claimed by no deployment: b/three.json.gz"):
        fleet = load(tmp_path, root, [dep()])
    assert fleet.unclaimed == ("b/three.json.gz",)  # the sidecar execution_details.json is not a trace


def test_known_traces_replace_the_scan(tmp_path, root):
    with pytest.warns(FleetWarning, match="x/ingested.json.gz"):
        fleet = load(tmp_path, root, [dep()], known_traces=["a/one.json.gz", "x/ingested.json.gz"])
    assert fleet.unclaimed == ("x/ingested.json.gz",)


def test_not_yaml_and_no_deployments(tmp_path, root):
    (tmp_path / "f.yaml").write_text("deployments: [")
    with pytest.raises(FleetError, match="not valid YAML"):
        load_fleet(tmp_path / "f.yaml", root, accelerators=ACC)
    (tmp_path / "g.yaml").write_text("window: {}\n")
    with pytest.raises(FleetError, match=r"g.yaml: missing field 'deployments'"):
        load_fleet(tmp_path / "g.yaml", root, accelerators=ACC)


def test_accelerators_come_from_the_hardware_table(tmp_path, root, monkeypatch):
    monkeypatch.setattr(fleet_module, "_hardware_names", lambda: {"H200"})
    path = write_fleet(tmp_path / "fleet.yaml", [dep(accelerator="MI300X")])
    with pytest.raises(FleetError, match="unknown accelerator 'MI300X'.*known: H200"):
        load_fleet(path, root)


def test_real_hardware_table_names_the_contract_accelerators():
    from catalogue import hardware

    assert {"H200", "H100", "H20", "B200", "MI300X", "XPU-A"} <= set(hardware.load_hardware())
    assert fleet_module._hardware_names() == set(hardware.load_hardware())


def test_planted_fleet_loads_against_the_real_hardware_table(planted_fleet):
    root, fleet_yaml, *_ = planted_fleet
    fleet = load_fleet(fleet_yaml, root)
    assert [d.accelerator for d in fleet.deployments] == ["H200", "MI300X", "B200"]
    assert fleet.deployment("serve-vllm").card_hours == 4000.0


def test_fsspec_trace_root(tmp_path, public_traces):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    data = (public_traces / "hta/triton_example/triton_example.json.gz").read_bytes()
    for rel in ("fleet-a/x/one.json.gz", "fleet-a/x/two.json.gz", "fleet-a/y/three.json.gz"):
        fs.pipe(f"/hotshape-test/{rel}", data + rel.encode())
    path = write_fleet(tmp_path / "fleet.yaml", [dep(traces=["x/*.json.gz"]), dep(id="deep", traces=["**/three.json.gz"])])
    fleet = load_fleet(path, "memory://hotshape-test/fleet-a", accelerators=ACC)
    assert fleet.assignment() == {"x/one.json.gz": "chat", "x/two.json.gz": "chat", "y/three.json.gz": "deep"}
    assert fleet.unclaimed == ()


@pytest.mark.parametrize(
    "bad, message",
    [
        (dep(phase_mx={"decode": 1.0}), "deployments[1].phase_mx: unknown field; did you mean phase_mix?"),
        (dep(card_hour=10, card_hours=None), "deployments[1].card_hour: unknown field; did you mean card_hours?"),
        (dep(card_hours="lots"), "deployments[1].card_hours: expected `float | null`, got `str`"),
    ],
)
def test_unknown_or_mistyped_fields_are_one_line_errors_with_the_path(tmp_path, root, bad, message):
    """A typo such as phase_mx once built a different release silently; now it is an error naming the file."""
    bad = {k: v for k, v in bad.items() if v is not None}
    with pytest.raises(FleetError) as err:
        load(tmp_path, root, [dep(id="other", traces=["b/*.json.gz"]), bad])
    assert str(err.value) == f"{tmp_path / 'fleet.yaml'}: {message}"
    assert "\n" not in str(err.value)


def test_unknown_top_level_and_window_fields(tmp_path, root):
    path = tmp_path / "f.yaml"
    path.write_text("deploymnets: []\n")
    with pytest.raises(FleetError, match=r"f.yaml: deploymnets: unknown field; did you mean deployments\?"):
        load_fleet(path, root, accelerators=ACC)
    path.write_text("window: {start: 2026-10-01, ends: 2026-10-31}\ndeployments: []\n")
    with pytest.raises(FleetError, match=r"window.ends: unknown field; did you mean end\?"):
        load_fleet(path, root, accelerators=ACC)


def test_unknown_phase_suggests_the_nearest(tmp_path, root):
    with pytest.raises(FleetError, match=r"unknown phase 'decod'.*did you mean decode\?"):
        load(tmp_path, root, [dep(phase_mix={"prefill": 0.5, "decod": 0.5})])
