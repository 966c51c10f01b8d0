"""Job-level decisions from observed replica states. No I/O; exhaustively table-tested."""

from tfkube.planner._plan import (
    EX_TEMPFAIL,
    is_retryable_exit,
    plan,
    should_retry,
    success_reached,
)
from tfkube.planner._types import (
    Action,
    Decision,
    DeleteJob,
    JobPhase,
    JobStatus,
    ReplicaState,
    ReplicaStatus,
    Restart,
    Start,
    Stop,
)

__all__ = [
    "EX_TEMPFAIL",
    "Action",
    "Decision",
    "DeleteJob",
    "JobPhase",
    "JobStatus",
    "ReplicaState",
    "ReplicaStatus",
    "Restart",
    "Start",
    "Stop",
    "is_retryable_exit",
    "plan",
    "should_retry",
    "success_reached",
]
