"""The TFJob operator: thin glue around the shared planner.

    kopf watch (TFJob, its Jobs, its pods) -> tfkube.kube.observe (pure: API objects ->
    JobStatus) -> tfkube.planner.plan -> _reconcile (pure: Decision -> API operations +
    status; the operations are `_ops`) -> _apply (the only side effects, through
    tfkube.kube.rest)

It stands on `tfkube.kube` (names, observe, REST) and `tfkube.render`, never on the
client backends (an import-linter contract).

`_operator` wires kopf and a per-TFJob work queue; all state lives in the API server (the
TFJob's status, object annotations), so the operator can be killed at any time.
`_settings` is what it is told: flags and its environment, read in one place.
"""

from tfkube.operator._operator import run_operator
from tfkube.operator._reconcile import Plan, reconcile
from tfkube.operator._settings import OperatorSettings

__all__ = [
    "OperatorSettings",
    "Plan",
    "reconcile",
    "run_operator",
]
