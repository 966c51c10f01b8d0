"""The package-index proxy's decisions (`engines/local/_egress.py`, pure): which targets
a confined requirements.txt step may reach, and the environment that sends uv and pip
through it."""

from __future__ import annotations

import pytest

from tfkube.engines.local._egress import (
    address_problem,
    package_env,
    parse_request_line,
    policy_for,
    target_problem,
)
from tfkube.netguard import index_target

PYPI = policy_for([])


def test_by_default_only_pypis_hosts_on_443() -> None:
    assert target_problem(PYPI, "pypi.org", 443) is None
    assert target_problem(PYPI, "files.pythonhosted.org", 443) is None
    assert target_problem(PYPI, "PyPI.org.", 443) is None
    for host, port in [("pypi.org", 80), ("pypi.org", 22), ("example.com", 443)]:
        why = target_problem(PYPI, host, port)
        assert why is not None
        assert f"{host}:{port} is not a package index" in why
        assert "--package-index" in why


def test_a_default_host_resolving_inside_is_refused_unless_its_range_is_allowed() -> None:
    for address in ("127.0.0.1", "10.1.2.3", "::1", "169.254.169.254", "::ffff:127.0.0.1"):
        why = address_problem(PYPI, "pypi.org", address)
        assert why is not None
        assert "internal address" in why
    assert address_problem(PYPI, "pypi.org", "151.101.0.223") is None
    import ipaddress

    allowed = policy_for([], [ipaddress.ip_network("10.0.0.0/8")])
    assert address_problem(allowed, "pypi.org", "10.1.2.3") is None
    assert address_problem(allowed, "pypi.org", "127.0.0.1") is not None


def test_an_admins_index_is_trusted_at_its_host_and_port_only() -> None:
    policy = policy_for(["http://127.0.0.1:8123/simple/"])
    assert target_problem(policy, "127.0.0.1", 8123) is None
    assert address_problem(policy, "127.0.0.1", "127.0.0.1") is None
    # Anything else on loopback, PyPI included, is refused by target.
    for host, port in [("127.0.0.1", 8124), ("127.0.0.1", 5432), ("pypi.org", 443)]:
        assert target_problem(policy, host, port) is not None
    mirror = policy_for(["https://Mirror.Example/simple/", "https://files.example:8443/"])
    assert target_problem(mirror, "mirror.example", 443) is None
    assert target_problem(mirror, "files.example", 8443) is None


def test_index_urls_are_checked() -> None:
    assert index_target("https://pypi.org/simple/") == ("pypi.org", 443)
    assert index_target("http://127.0.0.1:9/simple") == ("127.0.0.1", 9)
    for bad in ("ftp://x/", "pypi.org/simple", "https:///simple", "http://h:99999/"):
        with pytest.raises(ValueError, match="package index"):
            index_target(bad)


def test_request_lines() -> None:
    assert parse_request_line("CONNECT pypi.org:443 HTTP/1.1") == ("CONNECT", "pypi.org", 443, "")
    assert parse_request_line("CONNECT [::1]:443 HTTP/1.1") == ("CONNECT", "::1", 443, "")
    assert parse_request_line("GET http://127.0.0.1:9/simple/x/?a=1 HTTP/1.1") == (
        "GET",
        "127.0.0.1",
        9,
        "/simple/x/?a=1",
    )
    assert parse_request_line("HEAD http://h/f HTTP/1.1") == ("HEAD", "h", 80, "/f")
    for bad, why in [
        ("GET /relative HTTP/1.1", "absolute http://"),
        ("GET https://h/ HTTP/1.1", "absolute http://"),
        ("POST http://h/ HTTP/1.1", "POST is not served"),
        ("CONNECT pypi.org HTTP/1.1", "host:port"),
        ("garbage", "not an HTTP/1.x request"),
    ]:
        got = parse_request_line(bad)
        assert isinstance(got, str)
        assert why in got


def test_the_environment_names_the_proxy_and_the_first_index() -> None:
    env = package_env(["http://127.0.0.1:8123/simple/", "http://other/"], 3128)
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == ""
    assert env["UV_DEFAULT_INDEX"] == env["PIP_INDEX_URL"] == "http://127.0.0.1:8123/simple/"
    assert "UV_DEFAULT_INDEX" not in package_env([], 3128)
    direct = package_env([], 3128, ["http://127.0.0.1:8000"])
    assert direct["NO_PROXY"] == direct["no_proxy"] == "http://127.0.0.1:8000"
