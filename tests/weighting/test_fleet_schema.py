"""docs/fleet.schema.json is the JSON Schema of weighting.fleet's structs, and the example fleet obeys it."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import yaml

from weighting.fleet import FleetSpec, fleet_json_schema

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "docs" / "fleet.schema.json"


def test_committed_schema_is_the_structs_schema():
    committed = json.loads(SCHEMA.read_text())
    assert committed == fleet_json_schema(), (
        "docs/fleet.schema.json is stale: regenerate it with "
        "python -c 'import json; from weighting.fleet import fleet_json_schema; "
        "print(json.dumps(fleet_json_schema(), indent=2, sort_keys=True))' > docs/fleet.schema.json"
    )


def test_example_fleet_validates_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    doc = msgspec.to_builtins(yaml.safe_load((REPO / "examples" / "fleet.yaml").read_text()))  # dates → ISO strings
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert len(msgspec.convert(doc, FleetSpec).deployments) == 4


def test_schema_refuses_a_misspelt_field():
    jsonschema = pytest.importorskip("jsonschema")
    doc = msgspec.to_builtins(yaml.safe_load((REPO / "examples" / "fleet.yaml").read_text()))
    doc["deployments"][2]["phase_mx"] = {"decode": 1.0}
    with pytest.raises(jsonschema.ValidationError, match="phase_mx"):
        jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
