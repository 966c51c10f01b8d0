"""Workload origins, grants and passes (pure: `tfkube.server.core.origins`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tfkube.server.core.origins import (
    Origins,
    Pass,
    PassError,
    UsedGrants,
    open_grant,
    open_pass,
    origins_for,
    parse_workload_url,
    safe_next,
    sign_grant,
    sign_pass,
    workload_of,
)

KEY = b"k" * 32
T = "0123456789abcdef"
WILD = Origins("https", "wl.example.com", None)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("https://*.wl.example.com", WILD),
        ("http://*.localhost:8470", Origins("http", "localhost", 8470)),
        ("https://*.wl.example.com:8443/", Origins("https", "wl.example.com", 8443)),
    ],
)
def test_parse_workload_url(value: str, expected: Origins) -> None:
    assert parse_workload_url(value) == expected


@pytest.mark.parametrize(
    "value",
    ["https://wl.example.com", "ftp://*.x.com", "https://*.", "https://*.x.com/path", "*.x.com"],
)
def test_parse_workload_url_refuses(value: str) -> None:
    with pytest.raises(ValueError, match=r"wildcard|only the scheme"):
        parse_workload_url(value)


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1:8470", Origins("http", "localhost", 8470)),
        ("localhost:9000", Origins("http", "localhost", 9000)),
        ("[::1]:8470", Origins("http", "localhost", 8470)),
        ("127.0.0.1", Origins("http", "localhost", None)),
        ("tfkube.example.com", None),
        ("10.0.0.5:8470", None),
        ("", None),
    ],
)
def test_origins_derived_from_a_loopback_dashboard(host: str, expected: Origins | None) -> None:
    assert origins_for(None, "http", host) == expected
    assert origins_for(WILD, "http", host) == WILD  # configured ones win


def test_origin_urls() -> None:
    assert Origins("http", "localhost", 8470).url("notebook", T) == (
        f"http://notebook-{T}.localhost:8470"
    )
    assert WILD.url("tensorboard", T) == f"https://tensorboard-{T}.wl.example.com"


@pytest.mark.parametrize(
    ("configured", "host", "expected"),
    [
        (None, f"tensorboard-{T}.localhost:8470", ("tensorboard", T)),
        (None, f"NOTEBOOK-{T}.LOCALHOST:1", ("notebook", T)),
        (None, f"model-{T}.localhost:8470", None),  # model servers stay on the dashboard's
        (None, f"tensorboard-{T}x.localhost", None),
        (None, f"tensorboard-{T}.evil.com", None),
        (None, "127.0.0.1:8470", None),
        (None, "localhost:8470", None),
        (None, f"tensorboard-{T}", None),
        (WILD, f"tensorboard-{T}.wl.example.com", ("tensorboard", T)),
        (WILD, f"tensorboard-{T}.wl.example.com:444", None),
        (WILD, f"tensorboard-{T}.x.wl.example.com", None),
        (WILD, f"notebook-{T}.localhost:8470", ("notebook", T)),
    ],
)
def test_workload_of(
    configured: Origins | None, host: str, expected: tuple[str, str] | None
) -> None:
    assert workload_of(configured, host) == expected


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        (f"/proxy/notebook/{T}/lab?reset", f"/proxy/notebook/{T}/lab?reset"),
        (f"/proxy/notebook/{T}", f"/proxy/notebook/{T}"),
        (f"/proxy/notebook/{T}x/lab", f"/proxy/notebook/{T}/"),
        (f"/proxy/tensorboard/{T}/", f"/proxy/notebook/{T}/"),
        ("https://evil.example/", f"/proxy/notebook/{T}/"),
        ("//evil.example/", f"/proxy/notebook/{T}/"),
        (f"/proxy/notebook/{T}/\\evil", f"/proxy/notebook/{T}/"),
        (f"/proxy/notebook/{T}/a\r\nb", f"/proxy/notebook/{T}/"),
        ("", f"/proxy/notebook/{T}/"),
        (None, f"/proxy/notebook/{T}/"),
    ],
)
def test_safe_next(wanted: str | None, expected: str) -> None:
    assert safe_next("notebook", T, wanted) == expected


GRANT = Pass(user=7, session="d" * 64, kind="notebook", target=T, exp=1060.0, nonce="n1")


def test_a_grant_opens_its_target_until_it_expires() -> None:
    token = sign_grant(KEY, GRANT)
    assert open_grant(KEY, token, "notebook", T, 1000.0) == GRANT
    with pytest.raises(PassError, match="expired"):
        open_grant(KEY, token, "notebook", T, 1061.0)
    with pytest.raises(PassError, match="another workload"):
        open_grant(KEY, token, "notebook", "f" * 16, 1000.0)
    with pytest.raises(PassError, match="another workload"):
        open_grant(KEY, token, "tensorboard", T, 1000.0)


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda t: sign_pass(KEY, GRANT), id="a-pass-is-no-grant"),
        pytest.param(lambda t: sign_grant(b"x" * 32, GRANT), id="another-key"),
        pytest.param(lambda t: t.replace(".", ".x", 1), id="tampered-signature"),
        pytest.param(lambda t: "e30" + t[3:], id="tampered-payload"),
        pytest.param(lambda t: t.split(".")[0], id="unsigned"),
        pytest.param(lambda t: "", id="empty"),
    ],
)
def test_forged_grants_are_refused(forge: Callable[[str], str]) -> None:
    token = forge(sign_grant(KEY, GRANT))
    with pytest.raises(PassError):
        open_grant(KEY, token, "notebook", T, 1000.0)


def test_a_grant_is_no_pass() -> None:
    with pytest.raises(PassError):
        open_pass(KEY, sign_grant(KEY, GRANT), "notebook", T, 1000.0)
    assert open_pass(KEY, sign_pass(KEY, GRANT), "notebook", T, 1000.0).user == 7


def test_a_grant_is_used_once() -> None:
    used = UsedGrants()
    assert used.use(GRANT, 1000.0)
    assert not used.use(GRANT, 1001.0)
    assert used.use(Pass(7, "s", "notebook", T, 1060.0, nonce="n2"), 1001.0)
    assert not used.use(Pass(7, "s", "notebook", T, 1060.0, nonce=""), 1001.0)
    assert not used.use(GRANT, 1059.0)  # still remembered while it could be opened
