"""Every security rule of the server, each a test against the real server process:
authentication everywhere, 404 across teams (test_api), path traversal on outputs and
logs, unsafe archives refused with nothing kept, code fetches only with the job's claim,
tokens revoked, sign-in rate limited, no secret in logs or answers, uploads never run."""

from __future__ import annotations

import http.client
import io
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ._server import PASSWORD, Api, ServerProc, api_for, login, unique
from .conftest import TeamCtx, targz, upload, wait_job

HELLO = {"run.sh": '#!/usr/bin/env bash\necho hi\necho secret-output > "$TFKUBE_LOG_DIR/f.txt"\n'}


def raw_get(server: ServerProc, path: str, token: str) -> int:
    """A GET with the path exactly as written (httpx would normalise `..` away)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.fixture(scope="module")
def finished(platform: tuple[ServerProc, Api]) -> Iterator[tuple[Api, dict[str, object]]]:
    """One finished job per server (its own team), shared by this module's tests; its
    owner's client is closed with the module."""
    server, admin = platform
    name = admin.new_team()
    member = admin.new_user()
    admin.add_member(name, member, "member")
    api = api_for(server.url, member)
    try:
        api.ok(upload(api, name, "hello", targz(HELLO)), 201)
        job = api.ok(
            api.post(
                f"/api/v1/teams/{name}/jobs", json={"name": "t", "workers": 1, "code": "hello"}
            ),
            201,
        )
        yield api, wait_job(api, str(job["id"]), {"Succeeded", "Failed"})
    finally:
        api.close()


@pytest.fixture
def finished_job(finished: tuple[Api, dict[str, object]]) -> dict[str, object]:
    return finished[1]


@pytest.fixture
def owner(finished: tuple[Api, dict[str, object]]) -> Api:
    return finished[0]


TRAVERSALS = [
    "../../../../etc/passwd",
    "..%2f..%2f..%2fetc%2fpasswd",
    "%2e%2e/%2e%2e/etc/passwd",
    "%252e%252e/%252e%252e/etc/passwd",
    "..%5c..%5cetc%5cpasswd",
    "%2fetc%2fpasswd",
    "/etc/passwd",
    "file:%2f%2f%2fetc%2fpasswd",
    ".tfkube/../../../data",
]


@pytest.mark.parametrize("attack", TRAVERSALS)
def test_output_paths_cannot_leave_the_job(
    server: ServerProc, owner: Api, finished_job: dict[str, object], attack: str
) -> None:
    base = f"/api/v1/jobs/{finished_job['id']}"
    assert owner.get(f"{base}/outputs/f.txt").text == "secret-output\n"
    status = raw_get(server, f"{base}/outputs/{attack}", owner.token)
    assert status in {400, 404}, attack
    listing = owner.get(f"{base}/outputs", params={"path": attack.replace("%2f", "/")})
    assert listing.status_code in {400, 404}
    assert "root:" not in listing.text


@pytest.mark.parametrize("attack", ["..%2f..%2fworker-0", "%2e%2e", "worker-0%2f..%2f..", "..\\x"])
def test_log_paths_are_replica_names_only(
    server: ServerProc, owner: Api, finished_job: dict[str, object], attack: str
) -> None:
    status = raw_get(server, f"/api/v1/jobs/{finished_job['id']}/logs/{attack}", owner.token)
    assert status in {400, 404}


def _tar_with(member: tarfile.TarInfo, data: bytes = b"") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        run = tarfile.TarInfo("run.sh")
        run.size = 3
        tar.addfile(run, io.BytesIO(b"hi\n"))
        tar.addfile(member, io.BytesIO(data) if data else None)
    return buf.getvalue()


def _member(
    name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 0
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = size
    return info


def _zip(names: list[str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("run.sh", "echo hi\n")
        for name in names:
            zf.writestr(name, "x")
    return buf.getvalue()


BAD_ARCHIVES = {
    "dot-dot": (_tar_with(_member("../escape.sh", size=1), b"x"), "code.tar.gz"),
    "absolute": (_tar_with(_member("/etc/cron.d/evil", size=1), b"x"), "code.tar.gz"),
    "symlink-out": (_tar_with(_member("link", tarfile.SYMTYPE, "/etc/passwd")), "code.tar.gz"),
    "hardlink-out": (_tar_with(_member("hl", tarfile.LNKTYPE, "../../etc/passwd")), "code.tar.gz"),
    "device": (_tar_with(_member("dev", tarfile.CHRTYPE)), "code.tar.gz"),
    "fifo": (_tar_with(_member("pipe", tarfile.FIFOTYPE)), "code.tar.gz"),
    "zip-dot-dot": (_zip(["../../evil.py"]), "code.zip"),
    "zip-absolute": (_zip(["/tmp/evil.py"]), "code.zip"),
    "not-an-archive": (b"#!/bin/sh\nrm -rf /\n", "code.tar.gz"),
    "truncated-bomb": (_tar_with(_member("big", size=3 * 2**30))[:200], "code.tar.gz"),
    "no-entrypoint": (targz({"train.py": "print(1)\n"}), "code.tar.gz"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARCHIVES))
def test_unsafe_archives_are_refused_and_nothing_is_kept(
    server: ServerProc, team: TeamCtx, case: str
) -> None:
    data, filename = BAD_ARCHIVES[case]
    blobs = server.data_dir / "blobs"
    before = sorted(p for p in blobs.rglob("*") if p.is_file())
    r = upload(team.member, team.name, unique("bad"), data, filename)
    assert r.status_code == 400, (case, r.text)
    assert "upload refused" in r.json()["detail"]
    assert sorted(p for p in blobs.rglob("*") if p.is_file()) == before
    assert team.member.get("/api/v1/artifacts", params={"team": team.name}).json() == []


def test_member_count_bomb_is_refused(
    server: ServerProc, team: TeamCtx, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tfkube.launcher._fetch import MAX_MEMBERS

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(MAX_MEMBERS + 1):
            tar.addfile(tarfile.TarInfo(f"d{i}"))
    r = upload(team.member, team.name, "bomb", buf.getvalue())
    assert r.status_code == 400
    assert "entries" in r.json()["detail"]


def test_same_bytes_are_stored_once_and_versions_grow(server: ServerProc, team: TeamCtx) -> None:
    api = team.member
    first = api.ok(upload(api, team.name, "code", targz(HELLO)), 201)
    again = api.ok(upload(api, team.name, "code", targz(HELLO)), 201)
    assert again["id"] == first["id"]
    assert again["version"] == 1
    other = api.ok(upload(api, team.name, "copy", targz(HELLO)), 201)
    assert other["sha256"] == first["sha256"]
    assert len(list((server.data_dir / "blobs").glob(f"*/{first['sha256']}"))) == 1
    changed = api.ok(upload(api, team.name, "code", targz({**HELLO, "x.txt": "2"})), 201)
    assert changed["version"] == 2
    # A folder as loose files and as a zip: checked and packed the same deterministic way.
    files = [("files", ("run.sh", b"echo hi\n")), ("files", ("lib/util.py", b"x = 1\n"))]
    packed = api.ok(
        api.post(f"/api/v1/teams/{team.name}/artifacts", data={"name": "loose"}, files=files), 201
    )
    packed2 = api.ok(
        api.post(f"/api/v1/teams/{team.name}/artifacts", data={"name": "loose2"}, files=files), 201
    )
    assert packed["sha256"] == packed2["sha256"]
    assert packed["files"] == 2
    body = api.get(f"/api/v1/artifacts/{packed['id']}/download").content
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert sorted(tar.getnames()) == ["lib/util.py", "run.sh"]


def test_code_is_fetched_only_with_the_jobs_claim(
    server: ServerProc, owner: Api, finished_job: dict[str, object]
) -> None:
    sha = finished_job["code_sha256"]
    url = f"{server.url}/api/v1/code/{sha}"
    assert httpx.get(url).status_code == 404
    assert httpx.get(url, headers={"Authorization": f"Bearer {owner.token}"}).status_code == 404
    assert httpx.get(url, headers={"Authorization": "Bearer x.y"}).status_code == 404


def test_revoked_and_expired_tokens_stop_working(server: ServerProc, team: TeamCtx) -> None:
    api = team.member
    made = api.ok(api.post("/api/v1/tokens", json={"name": "short"}), 201)
    temp = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {made['token']}"})
    try:
        assert temp.get("/api/v1/users/me").status_code == 200
        listed = api.ok(api.get("/api/v1/tokens"))
        assert all("token" not in t for t in listed), "a token is shown only once"
        assert made["token"] not in api.get("/api/v1/tokens").text
        api.ok(api.delete(f"/api/v1/tokens/{made['id']}"), 204)
        assert temp.get("/api/v1/users/me").status_code == 401
    finally:
        temp.close()


def test_sign_in_is_rate_limited(server: ServerProc, admin: Api) -> None:
    name = admin.new_user()
    codes = [
        httpx.post(
            f"{server.url}/api/v1/auth/login", json={"name": name, "password": "wrong password!"}
        ).status_code
        for _ in range(6)
    ]
    assert codes[:5] == [401] * 5
    assert codes[5] == 429
    blocked = httpx.post(
        f"{server.url}/api/v1/auth/login", json={"name": name, "password": PASSWORD}
    )
    assert blocked.status_code == 429  # even the right password, until the window passes


def test_no_secret_in_logs_or_answers(server: ServerProc, admin: Api, team: TeamCtx) -> None:
    client, csrf = login(server.url, team.member.name)
    client.close()
    answers = [
        admin.get("/api/v1/users").text,
        team.member.get("/api/v1/users/me").text,
        team.member.get("/api/v1/tokens").text,
    ]
    secrets = [PASSWORD, team.member.token, admin.token, csrf, server.setup_token or "x"]
    for text in answers:
        for secret in secrets[:3]:
            assert secret not in text
        assert "password_hash" not in text
        assert "argon2" not in text
    logged = server.log.read_text()
    for secret in secrets[:4]:
        assert secret not in logged
    database = server.data_dir / "tfkube.db"
    if database.exists():
        raw = database.read_bytes() + b"".join(
            p.read_bytes() for p in server.data_dir.glob("tfkube.db-*")
        )
        assert team.member.token.encode() not in raw
        assert PASSWORD.encode() not in raw


def test_uploads_are_never_executed(server: ServerProc, team: TeamCtx, tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    evil = {
        "run.sh": f"#!/bin/sh\ntouch {marker}\n",
        "setup.py": f"open({str(marker)!r}, 'w')\n",
        "__init__.py": f"open({str(marker)!r}, 'w')\n",
        "model.pkl": b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.",
    }
    art = team.member.ok(upload(team.member, team.name, "evil", targz(evil)), 201)
    team.member.get(f"/api/v1/artifacts/{art['id']}/download")
    assert not marker.exists()


def test_viewer_cannot_change_anything(
    server: ServerProc, admin: Api, finished_job: dict[str, object]
) -> None:
    team_name = str(finished_job["team"])
    viewer = admin.new_user()
    admin.add_member(team_name, viewer, "viewer")
    v = api_for(server.url, viewer)
    try:
        assert upload(v, team_name, "x", targz(HELLO)).status_code == 403
        assert v.post(f"/api/v1/jobs/{finished_job['id']}/stop").status_code == 403
        assert v.delete(f"/api/v1/jobs/{finished_job['id']}").status_code == 403
        assert v.get(f"/api/v1/jobs/{finished_job['id']}/logs").status_code == 200
    finally:
        v.close()


def test_members_cannot_administer(server: ServerProc, team: TeamCtx) -> None:
    m = team.member
    assert m.post("/api/v1/users", json={"name": "x", "password": PASSWORD}).status_code == 403
    assert m.post("/api/v1/teams", json={"name": "x"}).status_code == 403
    assert (
        m.http.put(
            f"/api/v1/teams/{team.name}/members/{m.name}", json={"role": "admin"}
        ).status_code
        == 403
    )
