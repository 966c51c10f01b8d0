"""The environment every replica's launcher gets, on both engines. Pure.

Both engines call `replica_environment`; they differ only in the addresses and in the
paths (folders on this machine, or mount paths in a pod). Locally every address is listed
(`TFKUBE_CLUSTER`: each replica has its own port); in a cluster the addresses follow one
rule (`TFKUBE_ADDRESS`, `<job>-{role}-{index}.<job>:<port>`) that the launcher expands with
the replica counts, so a pod's size does not grow with the job's. In a cluster the index is
left out too: an Indexed Job's pods share one template and the launcher reads Kubernetes'
JOB_COMPLETION_INDEX instead.
"""

from __future__ import annotations

import json

from tfkube import contract as c
from tfkube.spec._models import EnvFromCommand, Role, TFJob


def replica_environment(
    job: TFJob,
    role: Role,
    cluster: dict[str, list[str]] | str,
    *,
    code_url: str | None,
    code_sha256: str | None,
    data_dir: str,
    log_dir: str,
    work_dir: str,
    termination_log: str,
    index: int | None = None,
    venv: str | None = None,
    venv_cache: str | None = None,
) -> dict[str, str]:
    """`TFKUBE_*` variables plus the role's own env (commands go to TFKUBE_ENV_COMMANDS).
    `cluster` is every address (role -> list), or an address rule (`str`).
    References to Secrets, ConfigMaps or pod fields are not values: a cluster renders them
    itself (`tfkube.render`), the local engine refuses them."""
    spec = job.spec.replicas.get(role)
    assert spec is not None, f"job {job.name} has no {role.value} replicas"
    plain = {k: v for k, v in spec.env.items() if isinstance(v, str)}
    commands = {k: v.command for k, v in spec.env.items() if isinstance(v, EnvFromCommand)}
    env = {
        **plain,
        c.JOB: job.name,
        c.ROLE: role.value,
        **(
            {c.ADDRESS: cluster}
            if isinstance(cluster, str)
            else {c.CLUSTER: json.dumps(cluster, sort_keys=True)}
        ),
        c.NUM_PS: str(job.spec.replicas.count(Role.PS)),
        c.NUM_WORKERS: str(job.spec.replicas.count(Role.WORKER)),
        c.HAS_CHIEF: "1" if job.spec.replicas.count(Role.CHIEF) else "0",
        c.DATA_DIR: data_dir,
        c.LOG_DIR: log_dir,
        c.WORK_DIR: work_dir,
        c.GRACE_SECONDS: str(job.spec.run_policy.termination_grace_seconds),
        c.TERMINATION_LOG: termination_log,
        "PYTHONUNBUFFERED": "1",
    }
    if code_url:
        env[c.CODE_URL] = code_url
    if spec.command is not None:
        env[c.COMMAND] = json.dumps(spec.command)
    elif job.spec.code is not None:
        env[c.ENTRYPOINT] = job.spec.code.entrypoint
    if index is not None:
        env[c.INDEX] = str(index)
    if code_sha256:
        env[c.CODE_SHA256] = code_sha256
    if spec.args:
        env[c.ARGS] = json.dumps(spec.args)
    if commands:
        env[c.ENV_COMMANDS] = json.dumps(commands, sort_keys=True)
    if venv:
        env[c.VENV] = venv
    if venv_cache:
        env[c.VENV_CACHE] = venv_cache
    return env
