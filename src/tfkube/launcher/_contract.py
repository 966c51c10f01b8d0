"""The runtime contract between an engine and the launcher: `TFKUBE_*` variables in, the
replica's environment and command line out. Pure functions over mappings.

Variables an engine sets (both engines set the same ones):
  TFKUBE_JOB, TFKUBE_ROLE, TFKUBE_INDEX (or Kubernetes' JOB_COMPLETION_INDEX),
  TFKUBE_CLUSTER (JSON role -> addresses), TFKUBE_NUM_PS, TFKUBE_NUM_WORKERS,
  TFKUBE_DATA_DIR, TFKUBE_LOG_DIR, TFKUBE_CODE_URL, TFKUBE_CODE_SHA256 (optional),
  TFKUBE_ENTRYPOINT, TFKUBE_WORK_DIR, TFKUBE_ARGS (JSON list, optional),
  TFKUBE_ENV_COMMANDS (JSON name -> shell command, optional),
  TFKUBE_CODE_TOKEN (optional: a bearer token for fetching TFKUBE_CODE_URL; the
  entrypoint does not get it).
The launcher adds TF_CONFIG, TFKUBE_CHECKPOINT_DIR, TFKUBE_SHARD_INDEX and
TFKUBE_NUM_SHARDS, and passes the classic flags to the entrypoint.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from tfkube.cluster import classic_flags, shard_for, tf_config

EX_DATAERR = 65
"""The code's checksum does not match: never retried."""
EX_NOINPUT = 66
"""The entrypoint is missing from the code: never retried."""
EX_TEMPFAIL = 75
"""The code could not be fetched (network, server): an infrastructure fault, retried."""
EX_CONFIG = 78
"""The contract itself is broken (missing variable, failing env command): never retried."""


CODE_TOKEN_ENV = "TFKUBE_CODE_TOKEN"


class ContractError(Exception):
    pass


@dataclass(frozen=True)
class ReplicaContract:
    job: str
    role: str
    index: int
    cluster: dict[str, list[str]]
    code_url: str
    code_sha256: str | None
    entrypoint: str
    work_dir: str
    data_dir: str
    log_dir: str
    args: tuple[str, ...]
    env_commands: dict[str, str]
    code_token: str | None = None
    """Sent as `Authorization: Bearer` when fetching an http(s) code URL."""

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The entrypoint's environment: `base` plus TF_CONFIG and the derived TFKUBE_*."""
        env = dict(base)
        env.pop(CODE_TOKEN_ENV, None)  # the fetch's credential, not the code's
        env["TF_CONFIG"] = tf_config(self.cluster, self.role, self.index)
        env["TFKUBE_INDEX"] = str(self.index)
        env["TFKUBE_CHECKPOINT_DIR"] = self.log_dir
        num_workers = len(self.cluster.get("worker", []))
        shard = shard_for(self.role, self.index, num_workers)
        if shard is not None:
            env["TFKUBE_SHARD_INDEX"], env["TFKUBE_NUM_SHARDS"] = map(str, shard)
        return env

    def argv(self, entrypoint_path: str) -> list[str]:
        """The command line: the entrypoint, the classic flags, then the spec's args."""
        if os.access(entrypoint_path, os.X_OK):
            head = [entrypoint_path]
        elif entrypoint_path.endswith(".py"):
            head = ["python3", entrypoint_path]
        else:
            head = ["bash", entrypoint_path]
        return [*head, *classic_flags(self.cluster, self.role, self.index), *self.args]


def _require(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if not value:
        raise ContractError(f"{name} is not set; the engine must set it for every replica")
    return value


def contract_from_env(env: Mapping[str, str]) -> ReplicaContract:
    """Read the contract an engine put in the environment. Raises ContractError."""
    index_text = env.get("TFKUBE_INDEX") or env.get("JOB_COMPLETION_INDEX")
    # isascii: str.isdigit() also accepts digits such as '²' that int() rejects.
    if index_text is None or not (index_text.isascii() and index_text.isdigit()):
        raise ContractError("TFKUBE_INDEX (or JOB_COMPLETION_INDEX) must be a whole number")
    try:
        cluster = json.loads(_require(env, "TFKUBE_CLUSTER"))
        args = json.loads(env.get("TFKUBE_ARGS") or "[]")
        commands = json.loads(env.get("TFKUBE_ENV_COMMANDS") or "{}")
    except json.JSONDecodeError as exc:
        raise ContractError(f"a TFKUBE_* JSON variable is malformed: {exc}") from None
    # Well-formed JSON of the wrong shape would otherwise surface later as a crash (or,
    # for a string in TFKUBE_ARGS, as one argument per character).
    if not isinstance(cluster, dict) or not all(
        isinstance(v, list) and all(isinstance(a, str) for a in v) for v in cluster.values()
    ):
        raise ContractError("TFKUBE_CLUSTER must be a JSON object of role -> list of addresses")
    if not isinstance(args, list):
        raise ContractError("TFKUBE_ARGS must be a JSON list of strings")
    if not isinstance(commands, dict):
        raise ContractError("TFKUBE_ENV_COMMANDS must be a JSON object of name -> command")
    role = _require(env, "TFKUBE_ROLE")
    index = int(index_text)
    try:
        tf_config(cluster, role, index)
    except ValueError as exc:
        raise ContractError(f"TFKUBE_ROLE/TFKUBE_INDEX do not fit TFKUBE_CLUSTER: {exc}") from None
    return ReplicaContract(
        job=_require(env, "TFKUBE_JOB"),
        role=role,
        index=index,
        cluster=cluster,
        code_url=_require(env, "TFKUBE_CODE_URL"),
        code_sha256=env.get("TFKUBE_CODE_SHA256") or None,
        entrypoint=env.get("TFKUBE_ENTRYPOINT") or "run.sh",
        work_dir=_require(env, "TFKUBE_WORK_DIR"),
        data_dir=env.get("TFKUBE_DATA_DIR", ""),
        log_dir=env.get("TFKUBE_LOG_DIR", ""),
        args=tuple(str(a) for a in args),
        env_commands={str(k): str(v) for k, v in commands.items()},
        code_token=env.get(CODE_TOKEN_ENV) or None,
    )
