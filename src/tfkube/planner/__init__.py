"""Job-level decisions from observed replica states. No I/O; exhaustively table-tested."""

from tfkube.planner._plan import (
    is_retryable_exit,
    plan,
    should_retry,
    stalled_replicas,
    success_reached,
)
from tfkube.planner._scale import (
    MAX_WORKERS,
    Resize,
    cluster_scale_problems,
    scale_problems,
    scaled_job,
)
from tfkube.planner._stragglers import (
    TRAINING_ROLES,
    median_rate,
    step_rate,
    steps_in,
    stragglers,
    trim,
)
from tfkube.planner._types import (
    Action,
    Decision,
    DeleteJob,
    JobPhase,
    JobStatus,
    Replica,
    ReplicaState,
    ReplicaStatus,
    Restart,
    Start,
    Stop,
    settled,
)

__all__ = [
    "MAX_WORKERS",
    "TRAINING_ROLES",
    "Action",
    "Decision",
    "DeleteJob",
    "JobPhase",
    "JobStatus",
    "Replica",
    "ReplicaState",
    "ReplicaStatus",
    "Resize",
    "Restart",
    "Start",
    "Stop",
    "cluster_scale_problems",
    "is_retryable_exit",
    "median_rate",
    "plan",
    "scale_problems",
    "scaled_job",
    "settled",
    "should_retry",
    "stalled_replicas",
    "step_rate",
    "steps_in",
    "stragglers",
    "success_reached",
    "trim",
]
