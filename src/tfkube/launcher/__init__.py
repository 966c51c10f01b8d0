"""What runs inside every replica, on both engines: fetch and verify the code, build the
environment (TF_CONFIG, classic flags, TFKUBE_*), run the entrypoint, forward signals,
and make sure nothing it started outlives it.

Standard library only (plus `tfkube.cluster`, which is too), so that it can run inside a
stock TensorFlow image where tfkube is not installed.
"""

from tfkube.launcher._contract import (
    EX_CONFIG,
    EX_DATAERR,
    EX_NOINPUT,
    EX_TEMPFAIL,
    ContractError,
    ReplicaContract,
    contract_from_env,
)
from tfkube.launcher._fetch import FetchError, fetch_code, sha256_file

__all__ = [
    "EX_CONFIG",
    "EX_DATAERR",
    "EX_NOINPUT",
    "EX_TEMPFAIL",
    "ContractError",
    "FetchError",
    "ReplicaContract",
    "contract_from_env",
    "fetch_code",
    "sha256_file",
]
