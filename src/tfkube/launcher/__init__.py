"""What runs inside every replica, on both engines: fetch and verify the code, build the
environment (TF_CONFIG, classic flags, TFKUBE_*), install the code's requirements, run the
entrypoint, forward signals, and make sure nothing it started outlives it.

Standard library only (plus `tfkube.tfcluster` and `tfkube.contract`, which are too), so
that it can run inside a stock TensorFlow image where tfkube is not installed.
"""

from tfkube.launcher._deps import DepsError, ensure_venv, file_lock, requirements_key
from tfkube.launcher._fetch import (
    MAX_DOWNLOAD_BYTES,
    MAX_MEMBERS,
    MAX_UNPACKED_BYTES,
    ArchiveInfo,
    FetchError,
    check_archive,
    check_member,
    download,
    fetch_code,
    sha256_file,
    unpack,
)
from tfkube.launcher._progress import latest_write
from tfkube.launcher._settings import ContractError, ReplicaContract, contract_from_env

__all__ = [
    "MAX_DOWNLOAD_BYTES",
    "MAX_MEMBERS",
    "MAX_UNPACKED_BYTES",
    "ArchiveInfo",
    "ContractError",
    "DepsError",
    "FetchError",
    "ReplicaContract",
    "check_archive",
    "check_member",
    "contract_from_env",
    "download",
    "ensure_venv",
    "fetch_code",
    "file_lock",
    "latest_write",
    "requirements_key",
    "sha256_file",
    "unpack",
]
