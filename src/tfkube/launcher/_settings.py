"""The launcher's side of the runtime contract (`tfkube.contract` names the variables and
exit codes): `TFKUBE_*` variables in, the replica's environment and command line out.
Pure functions over mappings.

The launcher adds TF_CONFIG, TFKUBE_CHECKPOINT_DIR, TFKUBE_EXPORT_DIR, TFKUBE_SHARD_INDEX
and TFKUBE_NUM_SHARDS, and passes the classic flags to the entrypoint.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from tfkube import contract as c
from tfkube.tfcluster import (
    classic_flags,
    cluster_spec,
    replica_key,
    rule_address,
    shard_for,
    tf_config,
)


class ContractError(Exception):
    pass


@dataclass(frozen=True)
class ReplicaContract:
    job: str
    role: str
    index: int
    cluster: dict[str, list[str]]
    code_url: str | None
    """None: the job has no code; the role's command runs where the launcher started."""
    code_sha256: str | None
    entrypoint: str
    work_dir: str
    data_dir: str
    log_dir: str
    args: tuple[str, ...]
    env_commands: dict[str, str]
    termination_log: str | None = None
    venv: str | None = None
    venv_cache: str | None = None
    code_token: str | None = None
    """Sent as `Authorization: Bearer` when fetching an http(s) code URL."""
    command: tuple[str, ...] | None = None
    """The role's own program and arguments (run as given, before `args`), else None:
    the code's entrypoint with the classic flags."""

    @property
    def key(self) -> str:
        """The replica's name (`worker-0`): its log folder, its lines' prefix."""
        return replica_key(self.role, self.index)

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The entrypoint's environment: `base` plus TF_CONFIG and the derived TFKUBE_*."""
        env = dict(base)
        env.pop(c.CODE_TOKEN, None)  # the fetch's credential, not the code's
        env.pop(c.SHIP_TOKEN, None)  # nor is shipping's (tfkube.launcher._ship)
        env.pop(c.SHIP_URL, None)
        env.pop(c.DATA_TOKEN, None)  # nor the data's (tfkube.launcher._data)
        env.pop(c.DATA_URL, None)
        env.pop(c.DATA_CACHE_URL, None)
        env[c.TF_CONFIG] = tf_config(self.cluster, self.role, self.index)
        env[c.INDEX] = str(self.index)
        env[c.CHECKPOINT_DIR] = self.log_dir
        if self.log_dir:
            env[c.EXPORT_DIR] = os.path.join(self.log_dir, c.EXPORT_SUBDIR)
        num_workers = len(self.cluster.get("worker", []))
        shard = shard_for(self.role, self.index, num_workers)
        if shard is not None:
            env[c.SHARD_INDEX], env[c.NUM_SHARDS] = map(str, shard)
        return env

    def argv(self, entrypoint_path: str | None) -> list[str]:
        """The command line: the role's own command and the spec's args; or the
        entrypoint, the classic flags (tfkube's `run.sh` contract), then the spec's args."""
        if self.command is not None:
            return [*self.command, *self.args]
        assert entrypoint_path is not None, "no command: the entrypoint is needed"
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


def _count(env: Mapping[str, str], name: str) -> int:
    text = env.get(name) or "0"
    if not (text.isascii() and text.isdigit()):
        raise ContractError(f"{name} must be a whole number, not {text!r}")
    return int(text)


def _cluster(env: Mapping[str, str]) -> object:
    """Every address: listed (TFKUBE_CLUSTER), or by rule and counts (TFKUBE_ADDRESS)."""
    rule = env.get(c.ADDRESS)
    if not rule:
        return json.loads(_require(env, c.CLUSTER))
    try:
        address = rule_address(rule)
    except ValueError as exc:
        raise ContractError(f"{c.ADDRESS}: {exc}") from None
    counts = {
        "chief": min(_count(env, c.HAS_CHIEF), 1),
        "ps": _count(env, c.NUM_PS),
        "worker": _count(env, c.NUM_WORKERS),
    }
    return cluster_spec(counts, address)


def contract_from_env(env: Mapping[str, str]) -> ReplicaContract:
    """Read the contract an engine put in the environment. Raises ContractError."""
    index_text = env.get(c.INDEX) or env.get(c.K8S_INDEX)
    # isascii: str.isdigit() also accepts digits such as '²' that int() rejects.
    if index_text is None or not (index_text.isascii() and index_text.isdigit()):
        raise ContractError(f"{c.INDEX} (or {c.K8S_INDEX}) must be a whole number")
    # A role split into several Indexed Jobs: this Job's first index comes on top.
    offset = 0 if env.get(c.INDEX) else _count(env, c.INDEX_OFFSET)
    try:
        cluster = _cluster(env)
        args = json.loads(env.get(c.ARGS) or "[]")
        commands = json.loads(env.get(c.ENV_COMMANDS) or "{}")
        command = json.loads(env[c.COMMAND]) if env.get(c.COMMAND) else None
    except json.JSONDecodeError as exc:
        raise ContractError(f"a TFKUBE_* JSON variable is malformed: {exc}") from None
    # Well-formed JSON of the wrong shape would otherwise surface later as a crash (or,
    # for a string in TFKUBE_ARGS, as one argument per character).
    if not isinstance(cluster, dict) or not all(
        isinstance(v, list) and all(isinstance(a, str) for a in v) for v in cluster.values()
    ):
        raise ContractError(f"{c.CLUSTER} must be a JSON object of role -> list of addresses")
    if not isinstance(args, list):
        raise ContractError(f"{c.ARGS} must be a JSON list of strings")
    if not isinstance(commands, dict):
        raise ContractError(f"{c.ENV_COMMANDS} must be a JSON object of name -> command")
    if command is not None and (
        not isinstance(command, list) or not command or not all(isinstance(w, str) for w in command)
    ):
        raise ContractError(f"{c.COMMAND} must be a non-empty JSON list of strings")
    code_url = env.get(c.CODE_URL) or None
    if code_url is None and command is None:
        raise ContractError(f"{c.CODE_URL} or {c.COMMAND} must be set: there is nothing to run")
    role = _require(env, c.ROLE)
    index = int(index_text) + offset
    try:
        tf_config(cluster, role, index)
    except ValueError as exc:
        raise ContractError(f"{c.ROLE}/{c.INDEX} do not fit {c.CLUSTER}: {exc}") from None
    return ReplicaContract(
        job=_require(env, c.JOB),
        role=role,
        index=index,
        cluster=cluster,
        code_url=code_url,
        code_sha256=env.get(c.CODE_SHA256) or None,
        entrypoint=env.get(c.ENTRYPOINT) or c.DEFAULT_ENTRYPOINT,
        work_dir=_require(env, c.WORK_DIR),
        data_dir=env.get(c.DATA_DIR, ""),
        log_dir=env.get(c.LOG_DIR, ""),
        args=tuple(str(a) for a in args),
        env_commands={str(k): str(v) for k, v in commands.items()},
        termination_log=env.get(c.TERMINATION_LOG) or None,
        venv=env.get(c.VENV) or None,
        venv_cache=env.get(c.VENV_CACHE) or None,
        code_token=env.get(c.CODE_TOKEN) or None,
        command=tuple(command) if command is not None else None,
    )
