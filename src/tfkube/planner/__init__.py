"""Job-level decisions from observed replica states. No I/O; exhaustively table-tested."""

from tfkube.planner._plan import (
    is_retryable_exit,
    plan,
    should_retry,
    stalled_replicas,
    success_reached,
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
    "Action",
    "Decision",
    "DeleteJob",
    "JobPhase",
    "JobStatus",
    "Replica",
    "ReplicaState",
    "ReplicaStatus",
    "Restart",
    "Start",
    "Stop",
    "is_retryable_exit",
    "plan",
    "settled",
    "should_retry",
    "stalled_replicas",
    "success_reached",
]
