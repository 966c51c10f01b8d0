"""`tfkube serve`, `tfkube serving list|roll|stop` and `tfkube notebook`: thin commands over
the tfkube server's API (`--engine server`), and a foreground model server for a job of
the local engine (`tfkube serve JOB`, without a server)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tfkube.cli._common import EngineOpt, NamespaceOpt, app, err, fail, local_backend, out
from tfkube.cli._lifetime import describe, ends_with_this_process, foreground, stop_then_exit
from tfkube.contract import EXPORT_SUBDIR, SERVING_TOKEN, exit_status
from tfkube.engines import JobNotFound
from tfkube.engines.local import interrupts_held
from tfkube.modelserver import chosen_kind, model_server_command

if TYPE_CHECKING:
    from tfkube.client import Client
    from tfkube.wire import ModelServerOut

serving_app = typer.Typer(
    help="The team's model servers (on a tfkube server).", no_args_is_help=True
)
app.add_typer(serving_app, name="serving")

NameOpt = Annotated[
    str | None,
    typer.Option("--name", help="The model's name in /v1/models/<name> (default: the job's)."),
]
VersionOpt = Annotated[
    int | None,
    typer.Option("--version", help="An exported version (default: the latest, and newer ones)."),
]
RuntimeOpt = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        help="Kubernetes: tensorflow-serving (the stock image) or tfkube (tfkube's model "
        "server in tfkube's image); default: the server's --serving-runtime.",
    ),
]


def _client(team: str | None) -> tuple[Client, str]:
    try:
        from tfkube.client import Client
    except ImportError as exc:
        raise fail(f"{exc}; install the extra: pip install 'tfkube[server]'") from None
    try:
        client = Client(team=team)
        return client, client._team(team)
    except ValueError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # connection refused, bad token
        raise fail(f"cannot reach the tfkube server: {exc}") from None


def replicas_text(server: ModelServerOut) -> str:
    """`2 of 3 replicas ready (autoscaled 1-4 at 70% CPU)`, or empty where not counted."""
    if server.replicas is None and server.autoscale is None:
        return ""
    text = ""
    if server.replicas is not None:
        want = server.desired_replicas
        text = f"{server.replicas} of {want if want is not None else '?'} replicas ready"
    scale = server.autoscale
    if scale:
        low, high = scale.get("minReplicas", 1), scale.get("maxReplicas")
        target = scale.get("targetCPUUtilization", 70)
        text += f" (autoscaled {low}-{high} at {target}% CPU)"
    return text.strip()


def _how_to_call(server: ModelServerOut) -> list[str]:
    replicas = replicas_text(server)
    return [
        f"model server {server.name}: {server.status}"
        + (f", version {server.serving_version}" if server.serving_version is not None else "")
        + (f", {replicas}" if replicas else "")
        + (f" ({server.message})" if server.message else ""),
        f"REST URL: {server.url}",
        '  status:  curl -H "Authorization: Bearer $TOKEN" ' + server.url,
        '  predict: curl -H "Authorization: Bearer $TOKEN" -d \'{"instances": [[...]]}\' '
        + f"{server.url}:predict",
    ]


@app.command()
def serve(
    job: Annotated[str, typer.Argument(help="The job whose exported model to serve.")],
    name: NameOpt = None,
    version: VersionOpt = None,
    cpu: Annotated[str | None, typer.Option("--cpu", help="Kubernetes: its CPU.")] = None,
    memory: Annotated[str | None, typer.Option("--memory", help="Kubernetes: its memory.")] = None,
    runtime: RuntimeOpt = None,
    max_replicas: Annotated[
        int | None,
        typer.Option(
            "--max-replicas",
            min=1,
            help="Kubernetes: autoscale on CPU load up to this many replicas.",
        ),
    ] = None,
    min_replicas: Annotated[
        int | None,
        typer.Option("--min-replicas", min=1, help="With --max-replicas: at least (1)."),
    ] = None,
    target_cpu: Annotated[
        int | None,
        typer.Option(
            "--target-cpu",
            min=1,
            max=100,
            help="With --max-replicas: the CPU use (percent of each replica's CPU) "
            "replicas are scaled to (70).",
        ),
    ] = None,
    scale_down_seconds: Annotated[
        int | None,
        typer.Option(
            "--scale-down-seconds",
            min=0,
            help="With --max-replicas: how long load must stay low before replicas are "
            "removed (Kubernetes' default 300).",
        ),
    ] = None,
    wait: Annotated[bool, typer.Option(help="Wait until it answers.")] = True,
    port: Annotated[int, typer.Option("--port", help="Local engine: the REST port.")] = 8501,
    grpc_port: Annotated[
        int,
        typer.Option(
            "--grpc-port",
            help="Local engine: also TensorFlow Serving's gRPC API on this port (0: none).",
        ),
    ] = 0,
    max_request_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-request-bytes",
            min=1,
            help="Local engine: the largest REST body or gRPC message the model server "
            "reads (default 64 MiB).",
        ),
    ] = None,
    max_request_elements: Annotated[
        int | None,
        typer.Option(
            "--max-request-elements",
            min=1,
            help="Local engine: the most numbers or strings one request may bring "
            "(default 4194304; an input of known row shape also at most max_batch_size rows).",
        ),
    ] = None,
    engine: EngineOpt = "local",
    namespace: NamespaceOpt = None,
) -> None:
    """Serve a job's exported model with TensorFlow Serving's REST API (and, --engine
    local with --grpc-port, its gRPC API) and print its URL.

    --engine server: a model server of the team (a process, or on Kubernetes a Deployment
    of tensorflow/serving or, with --runtime tfkube, of tfkube's own model server) behind
    the server's login; it survives restarts.
    --engine local: tfkube's model server here, in the foreground, until Ctrl-C, SIGTERM
    or SIGHUP (a closed terminal), which stop it.

    --max-replicas (Kubernetes): its replicas follow its CPU load, from --min-replicas up
    to --max-replicas, at --target-cpu percent of each replica's --cpu (a
    HorizontalPodAutoscaler)."""
    from tfkube.render import ServingRuntime, parse_runtime

    try:
        parse_runtime(runtime, ServingRuntime.TFKUBE)
    except ValueError as exc:
        raise fail(f"--runtime: {exc}") from None
    autoscale = _autoscale(max_replicas, min_replicas, target_cpu, scale_down_seconds)
    if engine == "local":
        if namespace is not None:
            raise fail("--namespace is for --engine server")
        if autoscale is not None:
            raise fail(
                "--max-replicas: --engine local runs one model server here; autoscaling is "
                "for --engine server with a tfkube server on Kubernetes"
            )
        if runtime not in (None, ServingRuntime.TFKUBE.value):
            raise fail(
                "--runtime: --engine local runs tfkube's model server only; leave --runtime "
                "out, or use --engine server with a tfkube server on Kubernetes"
            )
        _serve_here(
            job, name, version, port, grpc_port, Bounds(max_request_bytes, max_request_elements)
        )
        return
    if grpc_port:
        raise fail("--grpc-port is for --engine local (a server's model servers have their own)")
    if max_request_bytes is not None or max_request_elements is not None:
        raise fail(
            "--max-request-bytes and --max-request-elements are for --engine local (a "
            "server's model servers keep the defaults, which its proxy's bound matches)"
        )
    if engine != "server":
        raise fail("serve needs --engine server (a tfkube server, on either engine) or local")
    from tfkube.spec import SpecError

    client, team = _client(namespace)
    with client:
        found = client.find(job, team=team)
        if found is None:
            raise fail(f"team {team} has no job named {job!r}", 1)
        try:
            server = client.serve(
                found.id,
                name=name,
                version=version,
                cpu=cpu,
                memory=memory,
                runtime=runtime,
                autoscale=autoscale,
            )
        except SpecError as exc:
            problems = "; ".join(f"{e.field}: {e.message}" for e in exc.errors)
            raise fail(f"cannot serve {job}: {problems}") from None
        except Exception as exc:
            raise fail(str(exc), 1) from None
        if wait:
            try:
                server = client.wait_ready(server.id)
            except TimeoutError as exc:
                raise fail(str(exc), 1) from None
    for line in _how_to_call(server):
        out.print(line, highlight=False, soft_wrap=True)


def _autoscale(
    most: int | None, least: int | None, target: int | None, down: int | None
) -> dict[str, int] | None:
    """`serve`'s autoscaling flags as the API's `autoscale` (None: not asked)."""
    if most is None:
        given = [
            flag
            for flag, value in (
                ("--min-replicas", least),
                ("--target-cpu", target),
                ("--scale-down-seconds", down),
            )
            if value is not None
        ]
        if given:
            raise fail(f"{', '.join(given)}: autoscaling needs --max-replicas too")
        return None
    asked = {
        "minReplicas": least,
        "maxReplicas": most,
        "targetCPUUtilization": target,
        "scaleDownStabilizationSeconds": down,
    }
    return {k: v for k, v in asked.items() if v is not None}


@dataclass(frozen=True)
class Bounds:
    """`--max-request-bytes` and `--max-request-elements` (None: the model server's own
    default)."""

    max_request_bytes: int | None = None
    max_request_elements: int | None = None


def model_server_argv(
    model: str,
    base: Path,
    port: int,
    version: int | None = None,
    grpc_port: int = 0,
    bounds: Bounds = Bounds(),
    command: Sequence[str] | None = None,
) -> list[str]:
    """The command of `tfkube serve --engine local`'s model server (pure given `command`:
    the program before its flags; None: the one `tfkube.modelserver` chooses, native
    where installed)."""
    if command is None:
        command = model_server_command(chosen_kind())
    argv = [
        *command,
        f"--model_name={model}",
        f"--model_base_path={base}",
        f"--rest_api_port={port}",
    ]
    if version is not None:
        argv.append(f"--model_version={version}")
    if grpc_port:
        argv.append(f"--port={grpc_port}")
    if bounds.max_request_bytes is not None:
        argv.append(f"--max_request_bytes={bounds.max_request_bytes}")
    if bounds.max_request_elements is not None:
        argv.append(f"--max_request_elements={bounds.max_request_elements}")
    return argv


def _serve_here(
    job: str, name: str | None, version: int | None, port: int, grpc_port: int, bounds: Bounds
) -> None:
    from tfkube.serving import choose_version, exported_versions

    try:
        view = local_backend().get(job)
    except JobNotFound as exc:
        raise fail(str(exc), 1) from None
    if not view.log_dir:
        raise fail(f"job {job!r} has no output folder", 1)
    base = Path(view.log_dir) / EXPORT_SUBDIR
    _, why = choose_version(exported_versions(base), version)
    if why is not None:
        raise fail(f"job {job!r}: {why}", 1)
    model = name or job
    argv = model_server_argv(model, base, port, version, grpc_port, bounds)
    url = f"http://127.0.0.1:{port}/v1/models/{model}"
    out.print(f"REST URL: {url}  (predict: POST {url}:predict; Ctrl-C stops it)", highlight=False)
    if grpc_port:
        out.print(
            f"gRPC: 127.0.0.1:{grpc_port}  (TensorFlow Serving's PredictionService, model {model})",
            highlight=False,
        )
    env = {k: v for k, v in os.environ.items() if k != SERVING_TOKEN}
    server: subprocess.Popen[bytes] | None = None
    with foreground():
        try:
            with interrupts_held():  # a signal now waits until the process is known
                # `kill -9` of this command ends its model server too.
                server = subprocess.Popen(argv, env=env, preexec_fn=ends_with_this_process())
            code = server.wait()
        except KeyboardInterrupt as interrupt:
            raise stop_then_exit(interrupt, partial(_stop_here, server)) from None
    raise typer.Exit(exit_status(code))


MODEL_SERVER_GRACE = 15.0
"""How long the model server gets after SIGTERM (uvicorn's graceful shutdown takes at most
5 s) before SIGKILL."""


def _stop_here(server: subprocess.Popen[bytes] | None, interrupt: KeyboardInterrupt) -> None:
    """Stop the foreground model server (by its PID: it is our child)."""
    if server is None or server.poll() is not None:
        return
    err.print(f"{describe(interrupt)}: stopping the model server (pid {server.pid})")
    server.terminate()
    try:
        server.wait(MODEL_SERVER_GRACE)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def servers_lines(servers: list[Any]) -> list[str]:
    """One line per model server, its REST URL under it (never cut to the terminal's
    width: the URL is what people copy)."""
    rows = [("NAME", "JOB", "STATUS", "VERSION", "REPLICAS", "REQUESTS", "ERRORS")]
    for s in servers:
        version = str(s.serving_version if s.serving_version is not None else "-")
        replicas = "-" if s.replicas is None else str(s.replicas)
        if s.desired_replicas is not None and s.desired_replicas != s.replicas:
            replicas += f"->{s.desired_replicas}"
        if s.autoscale:
            replicas += f" (auto {s.autoscale.get('minReplicas', 1)}-{s.autoscale['maxReplicas']})"
        rows.append(
            (
                s.name,
                s.job,
                s.status,
                version + ("" if s.version is None else " (pinned)"),
                replicas,
                str(s.requests),
                str(s.errors),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(rows[0], widths, strict=True)).rstrip()]
    for row, s in zip(rows[1:], servers, strict=True):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        lines.append(f"  {s.url}" + (f"  ({s.message})" if s.message else ""))
    return lines


@serving_app.command("list")
def list_servers(
    namespace: NamespaceOpt = None,
    stopped: Annotated[bool, typer.Option("--stopped", help="Include stopped ones.")] = False,
) -> None:
    """The team's model servers: status, version, request counts, URL."""
    client, team = _client(namespace)
    with client:
        servers = client.model_servers(team=team, stopped=stopped)
    for line in servers_lines(servers):
        out.print(line, highlight=False, soft_wrap=True)


@serving_app.command("roll")
def roll_server(
    name: Annotated[str, typer.Argument(help="The model server's name.")],
    version: Annotated[str, typer.Option("--version", help="An exported version, or `latest`.")],
    namespace: NamespaceOpt = None,
) -> None:
    """Roll a model server of the team to another version (Kubernetes: a rolling update,
    the old version answers until the new one is ready; locally: a restart)."""
    if version == "latest":
        chosen: int | None = None
    elif version.isdigit():
        chosen = int(version)
    else:
        raise fail(f"--version: {version!r} is not a version number or `latest`")
    from tfkube.spec import SpecError

    client, team = _client(namespace)
    with client:
        found = [s for s in client.model_servers(team=team) if s.name == name]
        if not found:
            raise fail(f"team {team} has no running model server named {name!r}", 1)
        try:
            rolled = client.roll_model_server(found[0].id, chosen)
        except SpecError as exc:
            problems = "; ".join(f"{e.field}: {e.message}" for e in exc.errors)
            raise fail(f"cannot roll {name}: {problems}") from None
    out.print(f"model server {rolled.name}: rolling to version {version}", highlight=False)


@serving_app.command("stop")
def stop_server(
    name: Annotated[str, typer.Argument(help="The model server's name.")],
    namespace: NamespaceOpt = None,
) -> None:
    """Stop a model server of the team."""
    client, team = _client(namespace)
    with client:
        found = [s for s in client.model_servers(team=team) if s.name == name]
        if not found:
            raise fail(f"team {team} has no running model server named {name!r}", 1)
        stopped = client.stop_model_server(found[0].id)
    out.print(f"model server {stopped.name}: {stopped.status}", highlight=False)


@app.command()
def notebook(
    namespace: NamespaceOpt = None,
    stop: Annotated[bool, typer.Option("--stop", help="Stop your notebook instead.")] = False,
) -> None:
    """Open your JupyterLab server in the team (on a tfkube server) and print its URL:
    `tfkube.Client()` in it is signed in as you."""
    client, team = _client(namespace)
    with client:
        if stop:
            mine = [n for n in client.notebooks() if n.team == team and n.state == "running"]
            for n in mine:
                client.stop_notebook(n.id)
            out.print(f"stopped {len(mine)} notebook(s) in team {team}", highlight=False)
            return
        try:
            opened = client.notebook(team=team)
        except Exception as exc:
            raise fail(str(exc), 1) from None
    out.print(f"notebook in team {team}: {opened.url}", highlight=False, soft_wrap=True)
    out.print("(open it in a browser signed in to the server)", highlight=False)
