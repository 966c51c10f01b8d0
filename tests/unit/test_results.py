"""A job's result file (`tfkube.contract.parse_result`) and how the server reads it
(`server/outputs/results.read_result`: never through a link, never more than the bound)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tfkube import contract
from tfkube.server.outputs.results import read_result


@pytest.mark.parametrize(
    ("text", "values"),
    [
        pytest.param(
            '{"test_accuracy": 0.97, "global_step": 1000}',
            {"test_accuracy": 0.97, "global_step": 1000},
            id="numbers",
        ),
        pytest.param(
            '{"eval/top-5": 0.99, "loss:val": -1.5e-3, "_x": 0}',
            {"eval/top-5": 0.99, "loss:val": -1.5e-3, "_x": 0},
            id="names-with-punctuation",
        ),
        pytest.param(" {} \n", {}, id="empty"),
    ],
)
def test_a_result_file_is_an_object_of_names_to_numbers(
    text: str, values: dict[str, object]
) -> None:
    parsed = contract.parse_result(text.encode())
    assert parsed == values
    assert list(parsed) == list(values)  # the file's order


@pytest.mark.parametrize(
    ("data", "why"),
    [
        pytest.param(b"[1, 2]", "one JSON object", id="a-list"),
        pytest.param(b"0.97", "one JSON object", id="a-number"),
        pytest.param(b"not json", "not JSON", id="not-json"),
        pytest.param(b'{"a": 1} {"b": 2}', "not JSON", id="two-objects"),
        pytest.param(b'{"a": NaN}', "finite", id="nan"),
        pytest.param(b'{"a": -Infinity}', "finite", id="infinity"),
        pytest.param(b'{"a": 1e999}', "finite", id="overflow"),
        pytest.param(b'{"a": 123456789012345678901234567890}', "too large", id="huge-int"),
        pytest.param(b'{"a": true}', "give a number", id="flag"),
        pytest.param(b'{"a": "0.97"}', "give a number", id="text"),
        pytest.param(b'{"a": null}', "give a number", id="null"),
        pytest.param(b'{"a": {"b": 1}}', "give a number", id="nested"),
        pytest.param(b'{"a": [1]}', "give a number", id="list-value"),
        pytest.param(b'{"a": 1, "a": 2}', "twice", id="repeated-name"),
        pytest.param(b"[" * 8_000 + b"]" * 8_000, "not JSON", id="deep-nesting"),
        pytest.param(json.dumps({"": 1}).encode(), "not a result name", id="empty-name"),
        pytest.param(json.dumps({"a\u0007": 1}).encode(), "not a result name", id="control"),
        pytest.param(json.dumps({"<b>x</b>": 1}).encode(), "not a result name", id="markup"),
        pytest.param(json.dumps({"a b": 1}).encode(), "not a result name", id="space"),
        pytest.param(json.dumps({"1st": 1}).encode(), "not a result name", id="digit-first"),
        pytest.param(json.dumps({"x" * 65: 1}).encode(), "not a result name", id="long-name"),
        pytest.param(
            json.dumps({f"m{i}": i for i in range(33)}).encode(), "more than 32", id="too-many"
        ),
        pytest.param(b" " * (16 * 1024 + 1), "larger than", id="too-big"),
        pytest.param(b'{"a": 1}\xff', "not JSON", id="not-utf8"),
    ],
)
def test_a_result_file_that_breaks_a_rule_says_which(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        contract.parse_result(data)


def test_the_server_reads_a_result_file(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text('{"test_accuracy": 0.9712}')
    assert read_result(str(tmp_path)).values == {"test_accuracy": 0.9712}
    assert read_result(str(tmp_path / "none")).values is None
    assert read_result(None).values is None


def test_the_server_never_follows_a_link_the_job_made(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"password": "hunter2"}')
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(secret, out / "result.json")
    found = read_result(str(out))
    assert found.values is None
    assert "not read" in found.problem
    os.unlink(out / "result.json")
    os.link(secret, out / "result.json")  # a second name of another file
    assert read_result(str(out)).values is None


def test_a_result_file_over_the_bound_is_refused_not_cut(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text('{"a": 1}' + " " * contract.RESULT_MAX_BYTES)
    found = read_result(str(tmp_path))
    assert found.values is None
    assert "larger than" in found.problem


def test_a_fifo_does_not_block_the_reader(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "result.json")
    assert read_result(str(tmp_path)).values is None
