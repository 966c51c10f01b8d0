"""The node cache's key route (`GET /api/v1/data/<job id>/<replica>/key`, issue 19) against
the real control plane and a real `tfkube server --engine kubernetes` with no outputs
claim (the set-up of tests/cluster/test_k8s_data.py), with the claims the server minted
into each job's Secret.

A node cache (`tfkube.datacache`) serves a tar from its disk only under the key the
server names for the caller's claim; keys are per team. So the key is what an attacker
wants named: each attack below must be refused (404, the data door's one refusal), with
no key in the answer, and the data door itself refuses the same:

- another team's job claim, for this team's job (the same bytes uploaded in both teams:
  their keys differ);
- another job of the same team's claim;
- the job's other claims (code, shipping), a member's API token, none, another scheme, a
  garbled or forged claim (another job's payload under this one's signature);
- names that lead elsewhere: `..`, encoded slashes and dots in the job id or replica, a
  replica that is no role;
- a job that ended (stopped), and one deleted.

The claim is the job's (one Secret per job, every replica holds it): any replica name
of its job is the same caller, and an uploaded set is one tar whatever the replica.
Neither a key nor a claim is ever in the server's log.

With a source the server staged with a shard rule (a real S3 store, tests/s3store.py) the
replica name is a folder of the staged view: each shard has its own key, the PS's share
is empty, and a replica the job does not have, `.`, `..`, encoded `/` and another team's
claim are refused.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from cluster._support import KubeCluster, wait_for
from cluster.test_k8s_data import LISTER, one_worker, store_secret, submit, upload_set
from cluster.test_operator import tfjob
from cluster.test_server_kubernetes import (
    Platform,
    Team,
    operated_team,
    running_platform,
    wait_phase,
)
from s3store import S3Store
from server.conftest import targz
from tfkube.contract import DATA_KEY_PATTERN
from tfkube.kube.names import (
    CODE_TOKEN_KEY,
    DATA_TOKEN_KEY,
    SHIP_TOKEN_KEY,
    code_token_secret_name,
)

ARCHIVE = targz({"digits/train.txt": "1 2 3\n", "readme": "the data set\n"})


@pytest.fixture(scope="module")
def platform(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    with running_platform(
        kube_cluster,
        tmp_path_factory.mktemp("key-route"),
        outputs_claim=None,
        code_url=None,
        server_args=("--allow-fetch-from", "127.0.0.1/32"),  # the S3 store on loopback
    ) as made:
        yield made


@pytest.fixture(scope="module")
def teams(platform: Platform, operator_kubeconfig: Path) -> Iterator[tuple[Team, Team]]:
    """Two operated teams, each with the very same bytes as its data set `digits`."""
    with (
        operated_team(platform, operator_kubeconfig, {"run.sh": LISTER}, False) as one,
        operated_team(platform, operator_kubeconfig, {"run.sh": LISTER}, False) as two,
    ):
        upload_set(one, ARCHIVE)
        upload_set(two, ARCHIVE)
        yield one, two


def claims(team: Team, job: str) -> dict[str, str]:
    """The claims the server minted for `job` (its Secret: code, ship, data)."""
    kube = team.platform.kube
    wait_for(f"{job}'s TFJob", lambda: tfjob(kube, team.namespace, job), 30)
    secret = kube.core.read_namespaced_secret(code_token_secret_name(job), team.namespace)
    keys = {"code": CODE_TOKEN_KEY, "ship": SHIP_TOKEN_KEY, "data": DATA_TOKEN_KEY}
    return {k: base64.b64decode(secret.data[v]).decode() for k, v in keys.items()}


def with_set(team: Team, name: str) -> tuple[str, dict[str, str]]:
    job = submit(team, {"manifest": yaml.safe_dump(one_worker(name)), "data": "digits"})
    return str(job["id"]), claims(team, name)


def raw_get(server: str, path: str, authorization: str | None) -> tuple[int, bytes]:
    """GET `path` exactly as written (no client normalises its dots or escapes)."""
    parts = urllib.parse.urlsplit(server)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": authorization} if authorization else {})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def bearer(claim: str) -> str:
    return f"Bearer {claim}"


class Refusals:
    """Asks `server` for what must be refused: 404 (or `status`), none of `keys` in the
    answer, nor any key."""

    def __init__(self, server: str, keys: list[str]) -> None:
        self.server, self.keys = server, keys

    def get(self, path: str, authorization: str | None, status: int = 404) -> None:
        got, body = raw_get(self.server, path, authorization)
        assert got == status, (path, got, body)
        for key in self.keys:
            assert key.encode() not in body, (path, body)
        assert b'"key"' not in body, (path, body)
        if status == 404 and body:
            said = (b"claim does not open it", b"Not Found", b"is not a replica of this job")
            assert any(words in body for words in said), (path, body)

    def attack(self, job: str, authorization: str | None, replica: str = "worker-0") -> None:
        """Both the key and the data itself: refused."""
        self.get(f"/api/v1/data/{job}/{replica}/key", authorization)
        self.get(f"/api/v1/data/{job}/{replica}", authorization)


def rewritten(claim: str, **changes: str) -> str:
    """`claim` with its payload changed, its signature kept (a forgery)."""
    payload, _, signature = claim.partition(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = json.dumps({**data, **changes}, separators=(",", ":"), sort_keys=True).encode()
    return f"{base64.urlsafe_b64encode(forged).rstrip(b'=').decode()}.{signature}"


def ask_key(server: str, job: str, claim: str, replica: str = "worker-0") -> httpx.Response:
    return httpx.get(
        f"{server}/api/v1/data/{job}/{replica}/key", headers={"Authorization": bearer(claim)}
    )


def test_the_key_route_names_a_key_for_its_own_jobs_claim_only(
    teams: tuple[Team, Team],
) -> None:
    one, two = teams
    server = one.platform.server
    a, a_claims = with_set(one, "key-a")
    b, b_claims = with_set(one, "key-b")
    c, c_claims = with_set(two, "key-c")

    def key_of(job: str, claim: str, replica: str = "worker-0") -> dict[str, Any]:
        r = ask_key(server.url, job, claim, replica)
        assert r.status_code == 200, r.text
        return dict(r.json())

    mine = key_of(a, a_claims["data"])
    assert DATA_KEY_PATTERN.fullmatch(mine["key"]), mine
    assert (mine["size"], mine["sha256"]) == (len(ARCHIVE), hashlib.sha256(ARCHIVE).hexdigest())
    assert key_of(b, b_claims["data"]) == mine  # the same team, the same bytes: one tar
    theirs = key_of(c, c_claims["data"])
    assert theirs["sha256"] == mine["sha256"]
    assert theirs["key"] != mine["key"]  # another team: never this team's copy
    # The claim is the job's, held by every replica: its other names are the same caller,
    # and an uploaded set is one tar.
    assert key_of(a, a_claims["data"], "worker-7") == mine
    refused = Refusals(server.url, [mine["key"], theirs["key"]])
    attack = refused.attack

    # Another team's claim, another job's of the same team: either way round.
    attack(a, bearer(c_claims["data"]))
    attack(c, bearer(a_claims["data"]))
    attack(a, bearer(b_claims["data"]))
    # The job's other claims, a member's API token, none, another scheme, garbled.
    attack(a, bearer(a_claims["code"]))
    attack(a, bearer(a_claims["ship"]))
    attack(a, bearer(one.member.token))
    attack(a, None)
    attack(a, "Bearer ")
    attack(a, f"Basic {a_claims['data']}")
    attack(a, f"Bearer{a_claims['data']}")
    attack(a, bearer(a_claims["data"][:-2] + "AA"))
    attack(a, bearer(a_claims["data"].replace(".", "")))
    attack(a, bearer("not.a-claim"))
    # Forged: job b's data claim rewritten to name job a, a's shipping claim rewritten
    # to open data (each under its own signature).
    attack(a, bearer(rewritten(b_claims["data"], job=a)))
    attack(a, bearer(rewritten(a_claims["ship"], sha256="data")))
    # Names that lead elsewhere: refused before anything is read.
    mine_claim = bearer(a_claims["data"])
    for replica in ("ps-x", "master-0", "worker-0..", "worker-1234567", "..", "%2e%2e",
                    "worker-0%2f..%2f..", "..%2Fworker-0"):  # fmt: skip
        refused.get(f"/api/v1/data/{a}/{replica}/key", mine_claim)
    refused.get(f"/api/v1/data/{a}/worker-0%00/key", mine_claim, 400)  # the server's NUL check
    for path in (
        f"/api/v1/data/{a}/../{c}/worker-0/key",
        f"/api/v1/data/{a}%2F..%2F{c}/worker-0/key",
        f"/api/v1/data/..%2F{a}/worker-0/key",
        f"/api/v1/data/{a}/worker-0/../../{c}/worker-0/key",
        f"/api/v1/data/{c}/worker-0/key/../../../{a}/worker-0/key",
        "/api/v1/data/%2e%2e/worker-0/key",
    ):
        refused.get(path, bearer(c_claims["data"]))
    # Still open to its own claim after all that.
    assert key_of(a, a_claims["data"]) == mine

    # Ended: stopped, the operator ends it; its claim opens nothing any more.
    one.member.ok(one.member.post(f"/api/v1/jobs/{a}/stop"))
    wait_phase(one.member, a, "Failed")
    attack(a, mine_claim)
    # Deleted: the same.
    one.member.ok(one.member.delete(f"/api/v1/jobs/{b}"), 204)
    attack(b, bearer(b_claims["data"]))
    assert key_of(c, c_claims["data"]) == theirs  # the other team's job is untouched

    # Never logged: no key, no claim.
    log = server.log.read_text()
    for secret in [*refused.keys, *a_claims.values(), *b_claims.values(), *c_claims.values()]:
        assert secret not in log


def test_a_staged_sources_keys_are_per_shard_and_only_for_its_shards(
    teams: tuple[Team, Team], s3_store: S3Store
) -> None:
    """A source the server staged with a shard rule: the replica name is a folder of the
    staged view, so here a name leading elsewhere would read other bytes."""
    one, two = teams
    server = two.platform.server
    bucket = s3_store.bucket()
    for i in range(4):
        s3_store.put(bucket, f"ds/part-{i}.bin", bytes([i]) * (2000 + i))
    source = {"source": f"s3://{bucket}/ds/", "endpoint": s3_store.endpoint,
              "credentials": store_secret(two, s3_store, "keys"), "shard": "byWorker"}  # fmt: skip
    job = submit(two, {"manifest": yaml.safe_dump(one_worker("key-shards", 2, **source))})
    d, claim = str(job["id"]), bearer(claims(two, "key-shards")["data"])

    def staged(replica: str) -> dict[str, Any] | None:
        r = ask_key(server.url, d, claim.removeprefix("Bearer "), replica)
        assert r.status_code in (200, 503), r.text  # 503 while the server stages
        return dict(r.json()) if r.status_code == 200 else None

    first = wait_for("the staging", lambda: staged("worker-0"), 90, 0.5)
    second = staged("worker-1")
    assert second is not None
    assert first["key"] != second["key"]  # each shard its own tar
    refused = Refusals(server.url, [first["key"], second["key"]])
    # The PS's share is empty (a shard rule gives data to workers only).
    empty = staged("ps-0")
    assert empty is not None
    assert (empty["size"], empty["sha256"]) == (1024, hashlib.sha256(bytes(1024)).hexdigest())
    # A replica the job does not have, names that would be folders elsewhere.
    for replica in ("worker-2", "ps-1", "chief-0", "evaluator-0"):
        refused.attack(d, claim, replica)
    for replica in (".", "%2e", "..", "%2e%2e", "worker-0%2f..", "..%2fworker-1", "data"):
        refused.get(f"/api/v1/data/{d}/{replica}/key", claim)
    # Another team's claim.
    _other, theirs = with_set(one, "key-e")
    refused.attack(d, bearer(theirs["data"]))
    assert staged("worker-0") == first
