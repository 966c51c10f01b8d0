"""The four-field form, coded once (`tfkube.spec.JobForm`): the CLI's quick form and the
server's form make the same job from the same values, the job model's bounds apply to
both, errors name each door's own fields (the CLI's flags, the server's form fields), and
the CLI passes what follows `--` as the training arguments."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from tfkube.cli import app
from tfkube.cli._app import QUICK_FORM, _flag, _job_from_args
from tfkube.server.jobs.forms import artifact_job
from tfkube.spec import JobForm, RestartPolicy, Role, SpecError, TFJob, form_job, read_form

FOUR = {"name": "mnist", "workers": 2, "ps": 1, "code": "mnist-code"}


def cli_job(values: dict[str, Any]) -> TFJob:
    """The CLI's door: its options collected into the form (None: not given)."""
    job, _ = _job_from_args(None, values)
    return job


def server_job(values: dict[str, Any]) -> TFJob:
    """The server's door: the request body as the form, the code an artifact."""
    return artifact_job(read_form(values))


def cli_errors(values: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        cli_job(values)
    assert info.value.source == "command line"
    return [(e.field, e.message) for e in info.value.errors]


def server_errors(values: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        server_job(values)
    assert info.value.source == "form"
    return [(e.field, e.message) for e in info.value.errors]


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({}, id="four-fields"),
        pytest.param({"ps": 0}, id="no-ps"),
        pytest.param({"entrypoint": "train.py"}, id="entrypoint"),
        pytest.param({"args": ["--train_steps=1000", "--lr", "0.1"]}, id="args"),
        pytest.param({"env": {"TF_CPP_MIN_LOG_LEVEL": "2"}}, id="env"),
        pytest.param({"chief": True, "evaluator": True}, id="chief-evaluator"),
        pytest.param({"cpu": "2", "memory": "4Gi", "gpu": 1}, id="resources"),
        pytest.param({"restart_policy": RestartPolicy.EXIT_CODE}, id="restart-policy"),
        pytest.param({"deadline_seconds": 60}, id="deadline"),
        pytest.param({"tensorboard": True}, id="tensorboard"),
    ],
)
def test_both_doors_make_the_same_job(extra: dict[str, Any]) -> None:
    values = {**FOUR, **extra}
    cli, server = cli_job(values), server_job(values)
    assert cli.spec.code is not None
    assert server.spec.code is not None
    assert cli.spec.code.source == "mnist-code"
    assert server.spec.code.source == "artifact:mnist-code"
    same_code = server.spec.model_copy(update={"code": cli.spec.code})
    assert server.model_copy(update={"spec": same_code}) == cli


def test_the_form_fills_in_the_job() -> None:
    job = cli_job(
        {
            **FOUR,
            "args": ["--train_steps=10"],
            "env": {"A": "b"},
            "chief": True,
            "evaluator": True,
            "cpu": "2",
            "gpu": 1,
            "deadline_seconds": 60,
            "tensorboard": True,
        }
    )
    replicas = job.spec.replicas
    assert replicas.counts() == {"chief": 1, "ps": 1, "worker": 2, "evaluator": 1}
    worker, chief, ps, evaluator = (
        replicas.get(r) or pytest.fail(f"no {r}")
        for r in (Role.WORKER, Role.CHIEF, Role.PS, Role.EVALUATOR)
    )
    assert worker.args == chief.args == ["--train_steps=10"]
    assert ps.args == evaluator.args == []
    assert all(r.env == {"A": "b"} for r in (worker, chief, ps, evaluator))
    assert (worker.resources.cpu, worker.resources.gpu) == ("2", 1)
    assert ps.resources.cpu is None
    assert job.spec.run_policy.active_deadline_seconds == 60
    assert job.spec.tensorboard is not None
    assert job.spec.code is not None
    assert job.spec.code.entrypoint == "run.sh"


def test_the_four_fields_alone_give_the_job_models_defaults() -> None:
    """What `tfkube run --name --workers --ps --code` always made: nothing else set."""
    job = cli_job(FOUR)
    written = job.model_dump(by_alias=True, exclude_defaults=True)
    assert written == {
        "metadata": {"name": "mnist"},
        "spec": {
            "replicas": {"ps": {}, "worker": {"replicas": 2}},
            "code": {"source": "mnist-code"},
        },
    }


NAME = "is not a valid job name"
AT_LEAST_0 = "it must be at least 0"


@pytest.mark.parametrize(
    ("change", "field", "flag", "message"),
    [
        pytest.param({"name": "Bad_Name"}, "name", "--name", NAME, id="name"),
        pytest.param({"name": "a" * 41}, "name", "--name", NAME, id="name-too-long"),
        pytest.param({"workers": 0}, "workers", "--workers", "at least one worker", id="workers-0"),
        pytest.param({"workers": -1}, "workers", "--workers", AT_LEAST_0, id="workers-negative"),
        pytest.param(
            {"workers": 100_001}, "workers", "--workers", "at most 100000", id="workers-bound"
        ),
        pytest.param({"ps": -1}, "ps", "--ps", AT_LEAST_0, id="ps-negative"),
        pytest.param({"ps": 100_001}, "ps", "--ps", "at most 100000", id="ps-bound"),
        pytest.param({"gpu": 17}, "gpu", "--gpu", "at most 16", id="gpu-bound"),
        pytest.param({"gpu": -1}, "gpu", "--gpu", AT_LEAST_0, id="gpu-negative"),
        pytest.param({"cpu": "lots"}, "cpu", "--cpu", "is not a quantity", id="cpu"),
        pytest.param({"memory": "2 GB"}, "memory", "--memory", "is not a quantity", id="memory"),
        pytest.param(
            {"entrypoint": "../evil.sh"}, "entrypoint", "--entrypoint", "inside", id="entrypoint"
        ),
        pytest.param(
            {"deadline_seconds": 0},
            "deadline_seconds",
            "--deadline-seconds",
            "more than 0",
            id="deadline",
        ),
        pytest.param({"env": {"1X": "y"}}, "env", "--env", "not a valid environment", id="env"),
        pytest.param({"env": {"TFKUBE_X": "y"}}, "env", "--env", "set by tfkube", id="env-ours"),
        pytest.param({"code": "  "}, "code", "--code", "choose the code", id="code-blank"),
        pytest.param(
            {"workers": "two"}, "workers", "--workers", "valid integer", id="workers-text"
        ),
    ],
)
def test_bounds_are_the_job_models_and_errors_name_each_doors_field(
    change: dict[str, Any], field: str, flag: str, message: str
) -> None:
    values = {**FOUR, **change}
    for fields, door in ((server_errors(values), field), (cli_errors(values), flag)):
        assert [f for f, _ in fields] == [door], fields
        assert message in fields[0][1]


def test_every_problem_is_reported_at_once_and_once() -> None:
    values = {**FOUR, "name": "Bad", "ps": -1, "deadline_seconds": 0, "env": {"1X": "y"}}
    assert sorted(f for f, _ in cli_errors(values)) == [
        "--deadline-seconds",
        "--env",  # set on every role, reported once
        "--name",
        "--ps",
    ]


def test_a_problem_without_a_form_field_keeps_the_jobs_path() -> None:
    assert _flag("spec.storage.data.path") == "spec.storage.data.path"
    assert _flag("deadline_seconds") == "--deadline-seconds"
    assert _flag("env.FOO") == "--env"


def test_every_form_field_is_a_quick_form_option() -> None:
    """The CLI offers the whole form: each field an option of `run` (args after `--`)."""
    command = typer.main.get_command(app)
    run = command.commands["run"]  # type: ignore[attr-defined]
    options = {opt for param in run.params for opt in param.opts}
    # data_secret is a server's alone (a team's secret); `tfkube run` reads a store with
    # --data-credentials FILE or the environment.
    wanted = {_flag(f) for f in JobForm.model_fields if f not in ("args", "data_secret")}
    assert wanted <= options, wanted - options


def _parsed(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    command = typer.main.get_command(app)
    run = command.commands["run"]  # type: ignore[attr-defined]
    ctx = run.make_context("run", argv)
    return dict(ctx.params), list(ctx.meta.get(QUICK_FORM, []))


@pytest.mark.parametrize(
    ("argv", "job_file", "args"),
    [
        pytest.param(
            ["--name", "x", "--workers", "1", "--code", "c", "--", "--train_steps=1000"],
            None,
            ["--train_steps=1000"],
            id="after-dash",
        ),
        pytest.param(
            ["--name", "x", "--code", "c", "--", "--workers", "9", "job.yaml", "--"],
            None,
            ["--workers", "9", "job.yaml", "--"],
            id="never-options-nor-a-job-file",
        ),
        pytest.param(["job.yaml"], "job.yaml", [], id="job-file"),
        pytest.param(["job.yaml", "--"], "job.yaml", [], id="job-file-empty-dash"),
    ],
)
def test_what_follows_the_dash_is_the_training_arguments(
    argv: list[str], job_file: str | None, args: list[str]
) -> None:
    params, training = _parsed(argv)
    assert (str(params["job_file"]) if params["job_file"] else None) == job_file
    assert training == args
    if job_file is None:
        assert params["workers"] != 9


def test_the_training_arguments_reach_the_workers_and_the_chief() -> None:
    job = cli_job({**FOUR, "chief": True, "args": ["--train_steps=1000"]})
    for role in ("worker", "chief"):
        spec = job.spec.replicas.get(Role(role))
        assert spec is not None
        assert spec.args == ["--train_steps=1000"]


def test_form_job_keeps_the_forms_code() -> None:
    """The one function both doors call: the server prefixes its artifact scheme first."""
    form = JobForm(**FOUR)  # type: ignore[arg-type]
    assert form_job(form).spec.code.source == "mnist-code"  # type: ignore[union-attr]
