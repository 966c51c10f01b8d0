"""The server's pure rules, one table each: scopes per role, CSRF, code claims, user
paths, the local queue's admission, artifact references, login rate limiting (the
four-field form: tests/unit/test_forms.py)."""

from __future__ import annotations

import pytest

from tfkube.server.core.paths import UnsafePath, safe_parts
from tfkube.server.core.ratelimit import LoginLimiter
from tfkube.server.core.scopes import Actor, Role, Scope, allowed, visible
from tfkube.server.core.security import (
    ClaimError,
    CodeClaim,
    check_csrf,
    csrf_token,
    password_problem,
    sign_claim,
    verify_claim,
)
from tfkube.server.jobs.admission import (
    Amount,
    Quota,
    Running,
    Waiting,
    admit,
    bytes_of,
    cpu_of,
    preemptions,
)
from tfkube.server.jobs.forms import ArtifactRef, parse_ref, server_problems

TEAM, OTHER = 1, 2


@pytest.mark.parametrize(
    ("role", "scope", "expected"),
    [
        (Role.VIEWER, Scope.JOBS_READ, True),
        (Role.VIEWER, Scope.LOGS_READ, True),
        (Role.VIEWER, Scope.JOBS_WRITE, False),
        (Role.VIEWER, Scope.ARTIFACTS_WRITE, False),
        (Role.VIEWER, Scope.TEAM_ADMIN, False),
        (Role.MEMBER, Scope.JOBS_WRITE, True),
        (Role.MEMBER, Scope.ARTIFACTS_WRITE, True),
        (Role.MEMBER, Scope.TEAM_ADMIN, False),
        (Role.ADMIN, Scope.TEAM_ADMIN, True),
        (Role.ADMIN, Scope.SITE_ADMIN, False),
    ],
)
def test_role_scopes(role: Role, scope: Scope, expected: bool) -> None:
    actor = Actor(user_id=1, roles={TEAM: role})
    assert allowed(actor, scope, TEAM) is expected
    assert allowed(actor, scope, OTHER) is False  # never in a team one is not in
    assert visible(actor, TEAM)
    assert not visible(actor, OTHER)


def test_site_admin_sees_and_may_do_everything() -> None:
    actor = Actor(user_id=1, site_admin=True)
    assert visible(actor, OTHER)
    assert all(allowed(actor, s, OTHER) for s in Scope)
    assert not allowed(Actor(user_id=2, roles={TEAM: Role.ADMIN}), Scope.SITE_ADMIN)


KEY = b"k" * 32
SID = "session-id"
GOOD = csrf_token(KEY, SID)


@pytest.mark.parametrize(
    ("method", "cookie", "sent", "origin", "referer", "ok"),
    [
        ("GET", True, None, None, None, True),  # safe methods change nothing
        ("POST", False, None, "http://evil.example", None, True),  # Bearer: no cookie
        ("POST", True, GOOD, None, None, True),  # no Origin sent: the token decides
        ("POST", True, GOOD, "http://srv:8470", None, True),
        ("POST", True, None, "http://srv:8470", None, False),  # missing token
        ("POST", True, "0" * 64, "http://srv:8470", None, False),  # wrong token
        ("POST", True, GOOD, "http://evil.example", None, False),  # other origin
        ("DELETE", True, GOOD, None, "http://evil.example/page", False),  # via Referer
        ("PUT", True, GOOD, "null", None, False),  # opaque origin
        ("PATCH", True, csrf_token(KEY, "other-session"), None, None, False),
    ],
)
def test_csrf(
    method: str, cookie: bool, sent: str | None, origin: str | None, referer: str | None, ok: bool
) -> None:
    verdict = check_csrf(
        method=method,
        cookie_auth=cookie,
        sent_token=sent,
        expected_token=GOOD,
        origin=origin,
        referer=referer,
        host="srv:8470",
    )
    assert verdict.ok is ok, verdict.reason


SHA = "a" * 64


@pytest.mark.parametrize(
    ("token", "sha", "now", "error"),
    [
        (sign_claim(KEY, CodeClaim("job1", SHA, 1000)), SHA, 999, None),
        (sign_claim(KEY, CodeClaim("job1", SHA, 1000)), SHA, 1001, "expired"),
        (sign_claim(KEY, CodeClaim("job1", SHA, 1000)), "b" * 64, 999, "another"),
        (sign_claim(b"x" * 32, CodeClaim("job1", SHA, 1000)), SHA, 999, "signature"),
        ("garbage", SHA, 0, "malformed"),
        (sign_claim(KEY, CodeClaim("job1", SHA, 1000)) + "x", SHA, 0, "signature"),
    ],
)
def test_code_claims(token: str, sha: str, now: float, error: str | None) -> None:
    if error is None:
        assert verify_claim(KEY, token, sha, now).job == "job1"
    else:
        with pytest.raises(ClaimError, match=error):
            verify_claim(KEY, token, sha, now)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("", ()),
        ("model.ckpt-1000.index", ("model.ckpt-1000.index",)),
        ("export/1/saved_model.pb", ("export", "1", "saved_model.pb")),
        ("..", None),
        ("../etc/passwd", None),
        ("a/../../b", None),
        ("a/./b", None),
        ("a//b", None),
        ("/etc/passwd", None),
        ("..\\secret", None),
        ("a\\b", None),
        ("%2e%2e/secret", None),  # double-encoded: one decoding already happened
        ("%252e%252e/secret", None),
        ("file:///etc/passwd", None),
        ("C:/windows", None),
        ("a\x00b", None),
    ],
)
def test_user_paths(text: str, parts: tuple[str, ...] | None) -> None:
    if parts is None:
        with pytest.raises(UnsafePath):
            safe_parts(text)
    else:
        assert safe_parts(text) == parts


GIB = 2**30
MACHINE = Amount(2.0, 8 * GIB, 0)


def w(job: str, team: int, cpu: float, mem: int = 0, gpu: int = 0) -> Waiting:
    return Waiting(job, team, Amount(cpu, mem, gpu))


@pytest.mark.parametrize(
    ("running", "waiting", "quotas", "start"),
    [
        ([], [w("a", 1, 1.5)], {}, ("a",)),  # fits
        ([Running(1, Amount(1.5))], [w("a", 1, 1.5)], {}, ()),  # does not fit now
        ([], [w("a", 1, 1.0), w("b", 1, 1.0), w("c", 1, 1.0)], {}, ("a", "b")),
        # Fair: team 2 holds nothing, so its job goes before team 1's second one.
        ([Running(1, Amount(1.0))], [w("a", 1, 1.0), w("b", 2, 1.0)], {}, ("b",)),
        # The fair head does not fit: nothing jumps past it.
        ([Running(1, Amount(1.0))], [w("big", 2, 1.5), w("small", 1, 0.5)], {}, ()),
        # A job larger than the machine runs alone when nothing else runs...
        ([], [w("huge", 1, 3.0)], {}, ("huge",)),
        # ...and waits while anything runs.
        ([Running(2, Amount(0.5))], [w("huge", 1, 3.0)], {}, ()),
        # A quota holds its own team back, not others.
        ([Running(1, Amount(1.0))], [w("a", 1, 0.5), w("b", 2, 0.5)], {1: Quota(cpu=1.0)}, ("b",)),
        ([Running(1, Amount(0.5))], [w("a", 1, 0.5)], {1: Quota(jobs=1)}, ()),
        ([], [w("m", 1, 0.5, 16 * GIB)], {}, ("m",)),  # alone: more memory than exists
        ([], [w("g", 1, 0.5, 0, 1)], {}, ("g",)),  # a GPU job on a machine without: alone
    ],
)
def test_admission(
    running: list[Running], waiting: list[Waiting], quotas: dict[int, Quota], start: tuple[str, ...]
) -> None:
    decision = admit(MACHINE, running, waiting, quotas)
    assert decision.start == start
    assert set(decision.messages) == {x.job for x in waiting} - set(start)


def test_queue_messages_give_the_position() -> None:
    decision = admit(
        MACHINE, [Running(1, Amount(2.0))], [w("a", 1, 1.0), w("b", 2, 1.0), w("c", 1, 1.0)], {}
    )
    assert decision.start == ()
    assert decision.messages["b"].startswith("queued: position 1 of 3")
    assert "position 3 of 3" in decision.messages["c"]
    quota = admit(MACHINE, [Running(1, Amount(1.0))], [w("a", 1, 1.0)], {1: Quota(cpu=1.0)})
    assert "quota" in quota.messages["a"]


def test_a_team_of_higher_priority_offers_its_jobs_first() -> None:
    urgent = Waiting("urgent", 2, Amount(1.0), priority=10)
    decision = admit(MACHINE, [Running(1, Amount(1.0))], [w("old", 1, 1.0), urgent], {})
    assert decision.start == ("urgent",)
    blocked = admit(MACHINE, [Running(1, Amount(2.0))], [w("old", 1, 1.0), urgent], {})
    assert blocked.head == "urgent"  # the one a preemption would be for


def r(job: str, cpu: float, priority: int = 0, started: float = 0.0) -> Running:
    return Running(1, Amount(cpu), job=job, priority=priority, started_at=started)


@pytest.mark.parametrize(
    ("running", "need", "priority", "stopped"),
    [
        # The newest of the lowest priority goes first, and only as many as needed.
        ([r("a", 1.0, started=1), r("b", 1.0, started=2)], 1.0, 5, ("b",)),
        ([r("a", 1.0, started=1), r("b", 1.0, started=2)], 2.0, 5, ("b", "a")),
        # The lowest priority before the newest.
        ([r("low", 1.0, 0, started=1), r("mid", 1.0, 3, started=2)], 1.0, 5, ("low",)),
        # Never an equal or a higher priority; none when stopping all would not do.
        ([r("same", 2.0, 5)], 1.0, 5, ()),
        ([r("low", 0.5, 0), r("high", 1.5, 9)], 1.0, 5, ()),
        # It fits already, or fits no machine: nothing is stopped.
        ([r("a", 1.0)], 1.0, 5, ()),
        ([r("a", 2.0)], 3.0, 5, ()),
    ],
)
def test_preemptions(
    running: list[Running], need: float, priority: int, stopped: tuple[str, ...]
) -> None:
    waiting = Waiting("w", 2, Amount(need), priority=priority)
    assert preemptions(MACHINE, running, waiting) == stopped


@pytest.mark.parametrize(
    ("quantity", "cores"), [(None, 0.5), ("2", 2.0), ("500m", 0.5), ("1.5", 1.5)]
)
def test_cpu_quantities(quantity: str | None, cores: float) -> None:
    assert cpu_of(quantity) == cores


@pytest.mark.parametrize(
    ("quantity", "size"), [(None, 0), ("2Gi", 2 * GIB), ("512Mi", 512 * 2**20), ("1G", 10**9)]
)
def test_memory_quantities(quantity: str | None, size: int) -> None:
    assert bytes_of(quantity) == size


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("mnist", ArtifactRef(name="mnist")),
        ("artifact:mnist", ArtifactRef(name="mnist")),
        ("mnist:3", ArtifactRef(name="mnist", version=3)),
        ("sha256:" + SHA, ArtifactRef(sha256=SHA)),
        ("https://example.com/code.tar.gz", None),
        ("./folder", None),
        ("Bad Name", None),
    ],
)
def test_artifact_refs(text: str, ref: ArtifactRef | None) -> None:
    assert parse_ref(text) == ref


def test_server_jobs_may_not_name_server_folders() -> None:
    from tfkube.spec import parse_job

    job = parse_job(
        {
            "metadata": {"name": "x"},
            "spec": {
                "replicas": {"worker": {}},
                "code": {"source": "artifact:c"},
                "storage": {"data": {"path": "/etc"}, "logs": {"path": "/root"}},
            },
        }
    )
    assert {p.field for p in server_problems(job)} == {
        "spec.storage.data.path",
        "spec.storage.logs.path",
    }


def test_login_rate_limit() -> None:
    now = [0.0]
    limiter = LoginLimiter(max_failures=3, window=60, clock=lambda: now[0])
    for _ in range(3):
        assert limiter.retry_after("user:a", "addr:x") is None
        limiter.failed("user:a", "addr:x")
    assert limiter.retry_after("user:a") == pytest.approx(60)
    assert limiter.retry_after("user:b", "addr:x") is not None  # same address
    assert limiter.retry_after("user:b", "addr:y") is None
    now[0] = 61
    assert limiter.retry_after("user:a", "addr:x") is None


@pytest.mark.parametrize(
    ("password", "ok"), [("short", False), ("long enough pass", True), (" padded password ", False)]
)
def test_password_rules(password: str, ok: bool) -> None:
    assert (password_problem(password) is None) is ok
