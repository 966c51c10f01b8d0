"""The model server's request bounds (pure): each input's bound by its signature, the flags
that set them on `python -m tfkube.serving` and `tfkube serve --engine local`. The
attacks themselves run against a real model server in
tests/security/test_model_server_inputs.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tfkube.cli._workloads import Bounds, model_server_argv
from tfkube.serving.__main__ import parse
from tfkube.serving._calls import element_bounds
from tfkube.serving._rest import (
    DEFAULT_MAX_ELEMENTS,
    DEFAULT_MAX_REQUEST_BYTES,
    Signature,
    TensorInfo,
)


def _signature(**shapes: tuple[int | None, ...] | None) -> Signature:
    return Signature({k: TensorInfo("float32", v) for k, v in shapes.items()}, {})


@pytest.mark.parametrize(
    ("shapes", "batch", "expected"),
    [
        ({"x": (None, 2)}, 256, {"x": 512}),
        ({"x": (None, 2)}, None, {}),  # no batching: only --max_request_elements
        ({"x": (4, 3)}, None, {"x": 12}),  # a whole known shape bounds itself
        ({"x": (None, None)}, 256, {}),  # a row of unknown size
        ({"x": None}, 256, {}),  # unknown rank
        ({"x": ()}, 256, {}),  # a scalar: one element, checked by its shape
        ({"x": (None,), "y": (None, 8, 8)}, 10, {"x": 10, "y": 640}),
    ],
)
def test_element_bounds(
    shapes: dict[str, tuple[int | None, ...] | None], batch: int | None, expected: dict[str, int]
) -> None:
    assert element_bounds(_signature(**shapes), batch) == expected


def test_the_model_servers_flags() -> None:
    base = ["--model_name=m", "--model_base_path=/x"]
    args = parse(base)
    assert (args.max_request_bytes, args.max_request_elements) == (
        DEFAULT_MAX_REQUEST_BYTES,
        DEFAULT_MAX_ELEMENTS,
    )
    args = parse([*base, "--max_request_bytes=1024", "--max_request_elements=10"])
    assert (args.max_request_bytes, args.max_request_elements) == (1024, 10)
    for wrong in ("--max_request_bytes=0", "--max_request_elements=-1", "--max_request_bytes=x"):
        with pytest.raises(SystemExit):
            parse([*base, wrong])


def test_tfkube_serve_passes_the_bounds_to_its_model_server() -> None:
    python = [sys.executable, "-m", "tfkube.serving"]
    argv = model_server_argv("m", Path("/e"), 8501, bounds=Bounds(2**20, 1000), command=python)
    assert argv[:3] == python
    assert "--max_request_bytes=1048576" in argv
    assert "--max_request_elements=1000" in argv
    plain = model_server_argv("m", Path("/e"), 8501)
    assert not [a for a in plain if a.startswith("--max_request")]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--engine", "server", "--max-request-bytes", "10"], "are for --engine local"),
        (["--engine", "server", "--max-request-elements", "10"], "are for --engine local"),
        (["--max-request-elements", "0"], "--max-request-elements"),
    ],
)
def test_tfkube_serve_refuses_the_bounds_where_they_do_not_apply(
    argv: list[str], words: str
) -> None:
    from typer.testing import CliRunner

    from tfkube.cli import app

    result = CliRunner().invoke(app, ["serve", "mnist", *argv])
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split()), result.output


def test_error_messages_are_shortened_in_the_middle() -> None:
    from tfkube.serving._rest import MAX_MESSAGE, Code, ServingError, shortened

    assert shortened("short") == "short"
    long = "a" * 10 + "b" * 10_000 + "z" * 10
    cut = ServingError(Code.INVALID_ARGUMENT, long).message
    assert cut.startswith("a" * 10)
    assert cut.endswith("z" * 10)
    assert f"({len(long) - MAX_MESSAGE} characters left out)" in cut
    assert len(cut) < MAX_MESSAGE + 100


def test_a_rest_body_is_refused_unread_by_its_commas_only_past_what_a_signature_takes() -> None:
    from tfkube.serving._calls import element_bounds
    from tfkube.serving._rest import ServingError, parse_predict

    signatures = {"serving_default": _signature(x=(None, 2))}

    def bounds(signature: Signature) -> dict[str, int]:
        return element_bounds(signature, 4)  # 8 elements

    rows = '{"signature_name": "serving_default", "instances": [%s]}'
    ok = parse_predict((rows % ",".join(["[1, 2]"] * 4)).encode(), signatures, 100, bounds)
    assert ok.inputs["x"].shape == (4, 2)
    with pytest.raises(ServingError, match="holds 10 elements; the signature takes at most 8"):
        parse_predict((rows % ",".join(["[1, 2]"] * 5)).encode(), signatures, 100, bounds)
    with pytest.raises(ServingError, match="over 8 values"):
        parse_predict((rows % ",".join(["[1, 2]"] * 50)).encode(), signatures, 100, bounds)
    # no signature: the body's own error, not a bound of 0
    with pytest.raises(ServingError, match="not found in signature def"):
        parse_predict(b'{"instances": [[1, 2], [3, 4]]}', {}, 100, bounds)
