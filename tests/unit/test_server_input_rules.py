"""The pure rules behind bounded inputs (issue 17, item 7): YAML bounds, body bounds, control
characters, Content-Disposition, the streaming multipart reader."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from tfkube.server.api.middleware import url_problem
from tfkube.server.artifacts import BadArchive, BadForm, TooLarge, receive_form
from tfkube.server.core.inputs import (
    MAX_BODY_BYTES,
    MAX_PROXY_BODY_BYTES,
    body_limit,
    content_disposition,
    control_problem,
    declared_too_large,
)
from tfkube.spec import SpecError, load_job_text, load_yaml, parse_job
from tfkube.spec._load import MAX_DEPTH, MAX_DOCUMENT_BYTES, MAX_NODES


def _bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param(_bomb(4), None, id="aliases-within-bounds"),
        pytest.param(_bomb(6), f"{MAX_NODES:,} values", id="alias-bomb"),
        pytest.param("a: &a [*a]", "a cycle", id="alias-cycle"),
        pytest.param("a: " + "[" * (MAX_DEPTH + 1), f"{MAX_DEPTH} levels", id="too-deep"),
        pytest.param("a: " + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2), None, id="deep-ok"),
        pytest.param(
            "x: " + "y" * MAX_DOCUMENT_BYTES, f"{MAX_DOCUMENT_BYTES:,} are read", id="big"
        ),
        pytest.param("base: &b {k: v}\nuse: {<<: *b, j: w}", None, id="merge-key"),
        pytest.param("a: [1, 2\n", "not valid YAML", id="broken"),
    ],
)
def test_yaml_bounds(text: str, error: str | None) -> None:
    if error is None:
        load_yaml(text)
        return
    with pytest.raises(SpecError) as caught:
        load_yaml(text)
    assert caught.value.errors[0].field == "(yaml)"
    assert error in caught.value.errors[0].message


def test_the_expanded_count_stops_the_bomb_before_it_is_built() -> None:
    # 9**12 values would not fit in memory: refused while composing, long before.
    with pytest.raises(SpecError, match="values"):
        load_job_text(_bomb(12))


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"metadata": {"name": "a\x00b"}}, "metadata.name"),
        (
            {"spec": {"replicas": {"worker": {"args": ["ok", "\x1b[2J"]}}}},
            "spec.replicas.worker.args[1]",
        ),
        ({"spec": {"x\x00": 1}}, "spec.'x\\x00'"),
    ],
)
def test_control_characters_in_a_job_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job(data)
    assert [e.field for e in caught.value.errors] == [field]


def test_newlines_and_tabs_in_job_values_are_fine() -> None:
    with pytest.raises(SpecError) as caught:
        parse_job({"metadata": {"description": "two\nlines\tand a tab"}})
    assert all("control character" not in e.message for e in caught.value.errors)


@pytest.mark.parametrize(
    ("method", "path", "limit"),
    [
        ("POST", "/api/v1/teams/vision/artifacts", None),
        ("POST", "/api/v1/teams/vision/artifacts/", None),
        ("GET", "/api/v1/teams/vision/artifacts", MAX_BODY_BYTES),
        ("POST", "/api/v1/teams/vision/jobs", MAX_BODY_BYTES),
        ("POST", "/api/v1/teams/a/b/artifacts", MAX_BODY_BYTES),
        ("PUT", "/proxy/notebook/abc/api/contents/x", MAX_PROXY_BODY_BYTES),
        ("POST", "/api/v1/users", MAX_BODY_BYTES),
    ],
)
def test_body_limits(method: str, path: str, limit: int | None) -> None:
    assert body_limit(method, path) == limit


@pytest.mark.parametrize(
    ("declared", "refused"),
    [(None, False), ("10", False), ("100", False), ("101", True), ("-1", True), ("1e9", True)],
)
def test_declared_lengths(declared: str | None, refused: bool) -> None:
    assert declared_too_large(declared, 100) is refused


@pytest.mark.parametrize(
    ("value", "allowed", "problem"),
    [
        ("plain name.txt", "", None),
        ("résumé", "", None),
        ("a\x00b", "", "a NUL"),
        ("a\nb", "", "a newline"),
        ("a\nb", "\n", None),
        ("a\x1bb", "", "U+001B"),
        ("a\x7fb", "", "U+007F"),
        ("tab\there", "", "a tab"),
    ],
)
def test_control_problems(value: str, allowed: str, problem: str | None) -> None:
    found = control_problem(value, allowed)
    assert (found is None) is (problem is None)
    if problem is not None:
        assert found is not None
        assert problem in found


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        ("/api/v1/jobs", b"team=a&q=b", None),
        ("/api/v1/jobs/a\x00b", b"", "(path)"),
        ("/api/v1/jobs", b"q=a%00b", "q"),
        ("/api/v1/jobs", b"q=a%0Ab", "q"),
        ("/api/v1/jobs", b"a%00=b", "(query)"),
        ("/api/v1/jobs", b"q=caf%C3%A9", None),
    ],
)
def test_url_problems(path: str, query: bytes, field: str | None) -> None:
    found = url_problem(path, query)
    assert (found[0] if found else None) == field


def _star(header: str) -> str:
    value = header.split("filename*=", 1)[1]
    charset, _, encoded = value.partition("''")
    assert charset == "UTF-8"
    return unquote(encoded, errors="strict")


@pytest.mark.parametrize(
    ("name", "fallback"),
    [
        ("model.tar.gz", "model.tar.gz"),
        ("résumé.txt", "resume.txt"),
        ('a "quoted"; name.txt', "a _quoted__ name.txt"),
        ("bad\nname\r.txt", "bad_name_.txt"),
        ("100%.txt", "100_.txt"),
        ("back\\slash/and.txt", "back_slash_and.txt"),
        ("日本語.txt", "txt"),
        ("", "download"),
    ],
)
def test_content_disposition(name: str, fallback: str) -> None:
    header = content_disposition(name)
    assert header.isascii()
    assert not any(c in header for c in "\r\n\x00")
    assert header.startswith(f'attachment; filename="{fallback}"')
    if header.count("filename*="):
        assert _star(header) == name
    else:
        assert fallback == name


# -- the streaming multipart reader -----------------------------------------------------------


def _form(parts: list[tuple[str, str | None, bytes]], boundary: str = "XyZ") -> bytes:
    out = b""
    for field, filename, data in parts:
        disposition = f'form-data; name="{field}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        out += data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


async def _chunks(data: bytes, size: int = 7) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def _read(tmp_path: Path, body: bytes, limits: dict[str, int] | None = None) -> object:
    staged: list[Path] = []
    counter = iter(range(1_000))
    limits = limits or {"code": 100, "data": 1000}

    def temp() -> Path:
        path = tmp_path / f"part-{next(counter)}"
        path.touch()
        return path

    return asyncio.run(
        receive_form(
            "multipart/form-data; boundary=XyZ",
            _chunks(body),
            temp,
            staged,
            lambda fields: limits[fields.get("kind", "code")],
        )
    )


def test_a_form_is_read_as_it_streams(tmp_path: Path) -> None:
    form = _read(
        tmp_path,
        _form(
            [
                ("name", None, b"mnist"),
                ("files", "run.sh", b"#!/bin/sh\n"),
                ("files", "a/b.py", b"x"),
            ]
        ),
    )
    assert form.fields == {"name": "mnist"}  # type: ignore[attr-defined]
    files = form.files  # type: ignore[attr-defined]
    assert [(f, n) for f, n, _ in files] == [("files", "run.sh"), ("files", "a/b.py")]
    assert files[0][2].read_bytes() == b"#!/bin/sh\n"
    assert form.limit == 100  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("parts", "error", "field"),
    [
        pytest.param([("file", "big.tar.gz", b"x" * 101)], TooLarge, None, id="over-code-limit"),
        pytest.param(
            [("kind", None, b"data"), ("file", "big.tar.gz", b"x" * 101)],
            None,
            None,
            id="data-kind",
        ),
        pytest.param(
            [("file", "a.tar.gz", b"x"), ("kind", None, b"data")], BadForm, "kind", id="kind-late"
        ),
        pytest.param([("files", "a\x00b", b"x")], BadForm, "files", id="nul-file-name"),
        pytest.param([("files", "a\x1bb", b"x")], BadForm, "files", id="esc-file-name"),
        pytest.param([("name", None, b"a\x00")], BadForm, "name", id="nul-field"),
        pytest.param([("name", None, b"x" * 5000)], BadForm, "name", id="long-field"),
        pytest.param([("name", None, b"\xff")], BadForm, "name", id="not-utf8"),
    ],
)
def test_form_refusals(
    tmp_path: Path,
    parts: list[tuple[str, str | None, bytes]],
    error: type[BadArchive] | None,
    field: str | None,
) -> None:
    if error is None:
        _read(tmp_path, _form(parts))
        return
    with pytest.raises(error) as caught:
        _read(tmp_path, _form(parts))
    if field is not None:
        assert isinstance(caught.value, BadForm)
        assert caught.value.field == field


def test_a_form_without_a_boundary_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadForm):
        asyncio.run(
            receive_form("multipart/form-data", _chunks(b""), lambda: tmp_path, [], lambda _: 1)
        )


@pytest.mark.parametrize("builtin", [True, False])
def test_check_tar_refuses_a_link_out_of_the_folder_with_or_without_the_data_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, builtin: bool
) -> None:
    """The server checks uploads with tarfile's `data` filter, or, on a Python without it
    (Debian 12's 3.11.2, tfkube's image built for the test cluster), with the launcher's
    same rule: a link out of the folder is refused either way, a plain archive passes."""
    import io
    import tarfile

    from tfkube.server.artifacts import check_tar

    if not builtin:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    good, bad = tmp_path / "good.tar.gz", tmp_path / "bad.tar.gz"
    for path, link in ((good, None), (bad, "../../etc/passwd")):
        with tarfile.open(path, "w:gz") as tar:
            data = b"print('hi')\n"
            info = tarfile.TarInfo("train.py")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            if link:
                sym = tarfile.TarInfo("escape")
                sym.type = tarfile.SYMTYPE
                sym.linkname = link
                tar.addfile(sym)
    assert check_tar(good, "train.py").files == 1
    with pytest.raises(BadArchive, match="'escape'"):
        check_tar(bad, "train.py")
