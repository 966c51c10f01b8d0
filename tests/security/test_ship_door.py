"""The shipping door (`POST /api/v1/ship/<job id>/...`, issue 18 point 2) against the real
control plane and a real `tfkube server --engine kubernetes` with no outputs claim (the
set-up of tests/cluster/test_shipping.py).

Replicas send their logs, event files and result to the server with a job-scoped claim
(the job's Secret, key `ship`). Each attack below must be refused and write nothing:

- another job's id with this job's claim (a replica writing into a neighbour's logs);
- a member's own API token, no token, a forged claim (anyone writing a job's logs);
- names that lead elsewhere: `..`, the kept-log folder `.tfkube/logs` (the server's own
  record of attempts), a checkpoint name (the model a server would serve), a start id
  that is not one;
- a chunk past the end (a gap), a chunk over the bound (read before refused);
- a deleted job's claim: the door is shut.
"""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx

from cluster._support import wait_for
from cluster.test_operator import tfjob
from cluster.test_server_kubernetes import Team, manifest, submit_manifest
from cluster.test_shipping import shipping
from tfkube import contract
from tfkube.kube.names import SHIP_TOKEN_KEY

__all__ = ["shipping"]


def test_the_shipping_door_opens_for_its_job_only(shipping: Team) -> None:
    team, api = shipping, shipping.member
    kube, server = team.platform.kube, team.platform.server
    a = submit_manifest(team, manifest("door-a", code={"source": "artifact:hello"}))
    b = submit_manifest(team, manifest("door-b", code={"source": "artifact:hello"}))
    wait_for("door-a's TFJob", lambda: tfjob(kube, team.namespace, "door-a"), 30)
    secret = kube.core.read_namespaced_secret("door-a-code-token", team.namespace)
    token = base64.b64decode(secret.data[SHIP_TOKEN_KEY]).decode()
    start = "c" * 32

    def post(job_id: str, path: str, bearer: str, data: bytes = b"x\n", **params: Any) -> int:
        r = httpx.post(
            f"{server.url}/api/v1/ship/{job_id}/{path}",
            content=data,
            params=params,
            headers={"Authorization": f"Bearer {bearer}"} if bearer else {},
        )
        return r.status_code

    assert post(a["id"], f"log/worker-0/{start}", token, offset=0) == 200
    # Another job of the same team, a member's own API token, no token, a forged one.
    assert post(b["id"], f"log/worker-0/{start}", token, offset=0) == 404
    assert post(a["id"], f"log/worker-0/{start}", api.token, offset=2) == 404
    assert post(a["id"], f"log/worker-0/{start}", "", offset=2) == 404
    assert post(a["id"], f"log/worker-0/{start}", token[:-2] + "AA", offset=2) == 404
    # Names that would lead anywhere else, and a file that is not shipped.
    assert post(a["id"], "file/%2e%2e/%2e%2e/evil/events.out.tfevents.1.h", token) in (400, 404)
    assert post(a["id"], "file/.tfkube/logs/worker-0/0.log", token) == 400
    assert post(a["id"], "file/model.ckpt-1.index", token) == 400
    assert post(a["id"], "log/worker-0/not-hex", token) == 400
    # Past the end: nothing written, the answer says where to send from.
    r = httpx.post(
        f"{server.url}/api/v1/ship/{a['id']}/log/worker-0/{start}",
        content=b"gap",
        params={"offset": 10},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert (r.status_code, r.json()) == (409, {"size": 2})
    # More than a chunk in one request: refused before it is read.
    big = b"x" * (contract.SHIP_CHUNK_BYTES + 1)
    assert post(a["id"], f"log/worker-0/{start}", token, data=big, offset=2) == 413
    text = api.get(f"/api/v1/jobs/{a['id']}/logs/worker-0", params={"attempt": 0}).text
    assert text == "x\n"
    # Deleted: the door is shut.
    api.ok(api.delete(f"/api/v1/jobs/{a['id']}"), 204)
    time.sleep(0.1)
    assert post(a["id"], f"log/worker-0/{start}", token, offset=2) == 404
