"""The TFJob operator: thin glue around the shared planner.

    kopf watch (TFJob, its Jobs, its pods) -> _observe (pure: API objects -> JobStatus)
    -> tfkube.planner.plan -> _reconcile (pure: Decision -> API operations + status)
    -> _kube (the only side effects)

`_operator` wires kopf and a per-TFJob work queue; all state lives in the API server (the
TFJob's status, object annotations), so the operator can be killed at any time.
"""

from tfkube.operator._observe import Observation, Prior, observe
from tfkube.operator._operator import OperatorOptions, run_operator, tfjob_model
from tfkube.operator._reconcile import Plan, reconcile

__all__ = [
    "Observation",
    "OperatorOptions",
    "Plan",
    "Prior",
    "observe",
    "reconcile",
    "run_operator",
    "tfjob_model",
]
