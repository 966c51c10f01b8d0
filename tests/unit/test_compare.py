"""The rules of comparing jobs (tfkube.server.jobs.compare), table-tested."""

from __future__ import annotations

import pytest

from tfkube.server.jobs.compare import (
    BadSelection,
    argument_columns,
    best_of,
    build,
    diff_rows,
    flatten,
    parse_ids,
    result_rows,
    setting_columns,
    split_args,
)
from tfkube.wire import JobOut


@pytest.mark.parametrize(
    ("given", "ids"),
    [
        (["a,b"], ["a", "b"]),
        (["a", "b", "c"], ["a", "b", "c"]),
        ([" a , b ,", "a"], ["a", "b"]),  # spaces, empty parts and repeats dropped
        ([",".join(f"j{i}" for i in range(10))], [f"j{i}" for i in range(10)]),
    ],
)
def test_ids_in_the_order_given(given: list[str], ids: list[str]) -> None:
    assert parse_ids(given) == ids


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ([], "got 0"),
        (["a"], "got 1"),
        (["a,a"], "got 1"),
        ([",".join(f"j{i}" for i in range(11))], "got 11"),
        (["a,../b"], "'../b' is not a job id"),
        (["a,b c"], "is not a job id"),
    ],
)
def test_a_bad_selection_says_how_to_fix_it(given: list[str], says: str) -> None:
    with pytest.raises(BadSelection) as caught:
        parse_ids(given)
    assert says in str(caught.value)
    if "got" in says:
        assert "give 2 to 10 job ids" in str(caught.value)


@pytest.mark.parametrize(
    ("args", "settings"),
    [
        (["--lr=0.1"], {"--lr": "0.1"}),
        (["--lr", "0.1"], {"--lr": "0.1"}),
        (["--lr", "-0.5"], {"--lr": "-0.5"}),  # a negative number is a value
        (["--verbose", "--lr=1"], {"--verbose": "", "--lr": "1"}),
        (["--verbose"], {"--verbose": ""}),
        (["train", "--x=1", "eval"], {"#1": "train", "--x": "1", "#2": "eval"}),
        (["-5"], {"#1": "-5"}),
        (["--eq=a=b"], {"--eq": "a=b"}),
    ],
)
def test_arguments_setting_by_setting(args: list[str], settings: dict[str, str]) -> None:
    assert split_args(args) == settings


def test_flatten_and_diff() -> None:
    a = flatten({"spec": {"n": 1, "on": True, "l": [1, 2], "o": [{"x": 1}], "none": None}})
    assert a == {"spec.n": "1", "spec.on": "true", "spec.l": "1 2", "spec.o[0].x": "1"}
    rows = diff_rows([{"x": "1", "y": "2"}, {"x": "1", "z": "3"}])
    assert [(r.name, r.values, r.differs) for r in rows] == [
        ("x", ["1", "1"], False),
        ("y", ["2", None], True),
        ("z", [None, "3"], True),
    ]


@pytest.mark.parametrize(
    ("values", "name", "best"),
    [
        ([0.5, 0.8, None], "test_accuracy", 1),
        ([0.5, 0.8], "test_loss", 0),
        ([3.0, 2.0], "error_rate", 1),
        ([30, 20], "train_seconds", 1),
        ([0.1, 0.2], "val_mse", 0),
        ([0.7, 0.7], "accuracy", None),  # all the same: nothing to choose
        ([0.7, None], "accuracy", None),  # one alone: nothing to compare
        ([0.9, 0.9, 0.5], "f1", 0),  # a tie: the first
    ],
)
def test_the_best_of_a_result(values: list[float | None], name: str, best: int | None) -> None:
    assert best_of(values, name) == best


def _job(name: str, result: dict[str, float | int] | None) -> JobOut:
    return JobOut(id=name, team="t", name=name, phase="Succeeded", created_at=0.0, result=result)


def _spec(name: str, args: list[str], workers: int) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": {"worker": {"replicas": workers, "args": args}, "ps": {"replicas": 1}},
            "storage": {"logs": {"hostPath": f"/srv/{name}"}},
            "code": {"entrypoint": "run.sh"},
        },
    }


def test_build_compares_results_arguments_and_settings() -> None:
    jobs = [_job("a", {"acc": 0.5, "loss": 1.0}), _job("b", {"acc": 0.8}), _job("c", None)]
    specs = [
        _spec("a", ["--lr=0.1", "--steps=100"], 2),
        _spec("b", ["--lr", "0.2", "--steps=100"], 2),
        _spec("c", ["--steps=100"], 4),
    ]
    out = build(jobs, specs)
    assert [j.name for j in out.jobs] == ["a", "b", "c"]
    assert [(r.name, r.values, r.best) for r in out.results] == [
        ("acc", [0.5, 0.8, None], 1),
        ("loss", [1.0, None, None], None),
    ]
    assert [(r.name, r.values, r.differs) for r in out.arguments] == [
        ("worker --lr", ["0.1", "0.2", None], True),
        ("worker --steps", ["100", "100", "100"], False),
    ]
    settings = {r.name: (r.values, r.differs) for r in out.settings}
    assert settings["spec.replicas.worker.replicas"] == (["2", "2", "4"], True)
    assert settings["spec.code.entrypoint"] == (["run.sh"] * 3, False)
    # The name heads the columns; the server's folders differ by design; args go by flag.
    assert not any(n.startswith(("metadata.name", "spec.storage")) for n in settings)
    assert "spec.replicas.worker.args" not in settings
    assert out.scalars is None


def test_columns_of_a_spec_without_replicas() -> None:
    assert argument_columns([{}]) == [{}]
    assert setting_columns([{"spec": {"replicas": None}}]) == [{}]
    assert result_rows([None, None]) == []
