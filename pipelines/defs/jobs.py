"""Jobs: ingest one trace; refresh weights → release → drift; evaluate a submission; re-score it."""

from __future__ import annotations

import dagster as dg

from pipelines.defs.ingest import kernel_events, op_shape_time
from pipelines.defs.kernels_eval import evaluation_results, scores
from pipelines.defs.release import release_bundle, weight_drift
from pipelines.defs.weighting import fleet_weights

# Asset jobs run the checks of the assets they select, so a failed blocking check stops the job.
ingest_job = dg.define_asset_job("ingest_trace", selection=dg.AssetSelection.assets(kernel_events, op_shape_time),
                                 description="Ingest one trace file (partition): kernel_events, op_shape_time.")
refresh_job = dg.define_asset_job("refresh_weights", selection=dg.AssetSelection.assets(fleet_weights, release_bundle, weight_drift),
                                  description="Fleet weights over every ingested trace, then release weights vN+1 and drift.")
evaluate_job = dg.define_asset_job("evaluate_submission", selection=dg.AssetSelection.assets(evaluation_results, scores),
                                   description="Evaluate one submission (partition) on the release, then score it.")
rescore_job = dg.define_asset_job("rescore", selection=dg.AssetSelection.assets(scores),
                                  description="Score stored results under the latest weights; no GPU.")
