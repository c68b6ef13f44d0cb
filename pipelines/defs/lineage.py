"""`dagster/column_lineage` of the assets whose columns are derived from an upstream asset's columns: which
upstream columns each column is computed from (the UI's column-level lineage)."""

import dagster as dg

_KERNEL_EVENTS, _OP_SHAPE_TIME, _FLEET_WEIGHTS, _FLEET = (
    dg.AssetKey(k) for k in ("kernel_events", "op_shape_time", "fleet_weights", "fleet_file"))

# {asset: {column: [(upstream asset, upstream column), ...]}}: how each column is computed (ingest.store.aggregates,
# weighting.weights.fleet_weights, flow.build's manifest).
DERIVED = {
    "op_shape_time": {  # kernel_events grouped by trace, operator, shape and phase
        "trace_id": [(_KERNEL_EVENTS, "trace_id")],
        "operator": [(_KERNEL_EVENTS, "operator")],
        "shape": [(_KERNEL_EVENTS, "shape")],
        "phase": [(_KERNEL_EVENTS, "phase")],
        "gpu_ns": [(_KERNEL_EVENTS, "dur_ns")],
        "calls": [(_KERNEL_EVENTS, "kernel")],  # one per GPU activity row of the group
    },
    "fleet_weights": {  # each profile's share of its GPU time, card-hour weighted over the fleet's deployments
        "operator": [(_OP_SHAPE_TIME, "operator")],
        "shape": [(_OP_SHAPE_TIME, "shape")],
        "phase": [(_OP_SHAPE_TIME, "phase")],
        "fleet_card_hours": [(_OP_SHAPE_TIME, "gpu_ns"), (_FLEET, "card_hours"), (_FLEET, "phase_mix")],
        "fleet_share": [(_OP_SHAPE_TIME, "gpu_ns"), (_FLEET, "card_hours"), (_FLEET, "phase_mix")],
        "n_profiles": [(_OP_SHAPE_TIME, "trace_id")],
        "n_deployments": [(_OP_SHAPE_TIME, "trace_id"), (_FLEET, "traces")],
    },
    "release_bundle": {  # the manifest: one problem per selected (operator, shape)
        "problem_id": [(_FLEET_WEIGHTS, "operator"), (_FLEET_WEIGHTS, "shape")],
        "operator": [(_FLEET_WEIGHTS, "operator")],
        "init_kwargs": [(_FLEET_WEIGHTS, "shape")],
        "input_kwargs": [(_FLEET_WEIGHTS, "shape")],
        "dtypes": [(_FLEET_WEIGHTS, "shape")],
    },
}


def column_lineage(asset: str) -> dg.MetadataValue:
    """The `dagster/column_lineage` metadata of `asset`."""
    return dg.MetadataValue.column_lineage(dg.TableColumnLineage(deps_by_column={
        column: [dg.TableColumnDep(asset_key=key, column_name=name) for key, name in deps]
        for column, deps in DERIVED[asset].items()}))
