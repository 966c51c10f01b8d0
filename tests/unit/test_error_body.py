"""One error body (`tfkube.wire.ErrorBody`) from the server to the client: every way the
real app refuses (a field's problem, a request that does not validate, an HTTP error with
its headers, the guards in front of the routes) answers with it, and the client reads it
back with the same model (`ServerError.of`). The app runs in this process on a real
SQLite database; requests go through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tfkube.client import ServerError
from tfkube.server.app import build_platform, create_app
from tfkube.server.core.config import ServerSettings
from tfkube.spec import FieldError
from tfkube.wire import ErrorBody


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    settings = ServerSettings(data_dir=tmp_path_factory.mktemp("server"))
    platform = build_platform(settings)
    try:
        yield create_app(settings, platform)
    finally:
        platform.engine.close()
        platform.database.dispose()


def ask(app: FastAPI, method: str, path: str, **kw: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.request(method, path, **kw)

    return asyncio.run(go())


WEAK = {"token": "nope", "name": "admin", "password": "short"}


@pytest.mark.parametrize(
    ("method", "path", "kw", "status", "fields", "detail"),
    [
        pytest.param(
            "POST", "/api/v1/setup", {"json": WEAK}, 422, ["password"], "password: ", id="field"
        ),
        pytest.param(
            "POST",
            "/api/v1/setup",
            {"json": {"name": "x"}},
            422,
            ["token", "password"],
            "token: Field required",
            id="not-valid",
        ),
        pytest.param(
            "POST",
            "/api/v1/auth/login",
            {"json": {"name": "nobody", "password": "wrong password!"}},
            401,
            [],
            "wrong user name or password",
            id="http-error",
        ),
        pytest.param("GET", "/api/v1/jobs", {}, 401, [], "", id="no-credentials"),
        pytest.param("GET", "/api/v1/jobs?q=a%01b", {}, 400, ["q"], "q: ", id="url-guard"),
        pytest.param(
            "POST",
            "/api/v1/auth/login",
            {"content": b"{}", "headers": {"Content-Length": str(1 << 40)}},
            413,
            [],
            "larger than",
            id="body-guard",
        ),
    ],
)
def test_every_refusal_is_one_error_body_the_client_reads(
    app: FastAPI,
    method: str,
    path: str,
    kw: dict[str, Any],
    status: int,
    fields: list[str],
    detail: str,
) -> None:
    r = ask(app, method, path, **kw)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"detail", "errors"}
    body = ErrorBody.model_validate_json(r.content)
    assert [p.field for p in body.errors] == fields
    assert detail in body.detail
    error = ServerError.of(r)
    assert (error.status, str(error)) == (status, body.detail)
    assert error.errors == [FieldError(p.field, p.message) for p in body.errors]


def test_a_body_is_made_from_field_message_pairs() -> None:
    body = ErrorBody.of("too many failed sign-ins", [("name", "wait")])
    assert body.model_dump() == {
        "detail": "too many failed sign-ins",
        "errors": [{"field": "name", "message": "wait"}],
    }


def test_an_answer_that_is_no_error_body_is_read_as_text() -> None:
    r = httpx.Response(502, text="<html>bad gateway</html>")
    error = ServerError.of(r)
    assert (error.status, str(error), error.errors) == (502, "<html>bad gateway</html>", [])
