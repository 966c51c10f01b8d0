"""Commands. Each one parses its input into a TFJob or a name, calls the backend, prints.

Exit codes: `_common.py`; what a signal does to what a command started: `_lifetime.py`.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.live import Live
from typer.core import TyperCommand

from tfkube import contract
from tfkube.cli._common import (
    EngineOpt,
    KubeconfigOpt,
    NamespaceOpt,
    app,
    err,
    fail,
    local_backend,
    out,
)
from tfkube.cli._display import job_panel, jobs_table, summary
from tfkube.cli._lifetime import describe, exit_code, foreground, run_service, stop_then_exit
from tfkube.engines import (
    Backend,
    Credentials,
    JobExists,
    JobNotFound,
    JobView,
    parse_credentials,
)
from tfkube.engines.local import LocalBackend
from tfkube.netguard import index_target
from tfkube.spec import (
    MAX_DOCUMENT_BYTES,
    FieldError,
    JobForm,
    RestartPolicy,
    SpecError,
    TFJob,
    dump_job,
    form_job,
    load_job_text,
    parse_job,
    read_form,
)

# -- engines ------------------------------------------------------------------------------

ENGINES = ("local", "kubernetes", "server")


def _engine(engine: str, namespace: str | None, kubeconfig: Path | None) -> Backend:
    """The backend the options name; the local one forks its supervisors (we are the CLI)."""
    if engine == "local":
        if namespace is not None or kubeconfig is not None:
            raise fail("--namespace and --kubeconfig are for --engine kubernetes")
        return local_backend()
    if engine == "kubernetes":
        from tfkube.engines.kubernetes import KubernetesBackend

        try:
            return KubernetesBackend(namespace=namespace, kubeconfig=kubeconfig)
        except Exception as exc:  # no kubeconfig, unreadable file, no such context
            raise fail(f"cannot reach a Kubernetes cluster: {exc}") from None
    if engine == "server":
        return _server_backend(namespace)
    raise fail(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def _server_backend(team: str | None) -> Backend:
    """The server `tfkube login` saved; `--namespace` names the team."""
    try:
        from tfkube.client import Client, ServerBackend
    except ImportError as exc:
        raise fail(f"{exc}; install the extra: pip install 'tfkube[server]'") from None
    try:
        return ServerBackend(Client(), team)
    except ValueError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:  # connection refused, bad token
        raise fail(f"cannot reach the tfkube server: {exc}") from None


@app.command()
def login(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8470.")],
    user: Annotated[str | None, typer.Option("--user", "-u", help="Your user name.")] = None,
    token: Annotated[
        str | None, typer.Option("--token", help="A personal API token made in the dashboard.")
    ] = None,
    team: Annotated[str | None, typer.Option("--team", help="The team commands use.")] = None,
    setup_token: Annotated[
        str | None,
        typer.Option("--setup-token", help="First start: create the first admin with it."),
    ] = None,
) -> None:
    """Sign in to a tfkube server; then `--engine server` (or TFKUBE_ENGINE=server) makes
    every command use it. The API token is kept in ~/.config/tfkube/login.json (0600)."""
    import getpass
    import socket

    try:
        from tfkube.client import Client, Login, ServerError, save_login, token_by_password
    except ImportError as exc:
        raise fail(f"{exc}; install the extra: pip install 'tfkube[server]'") from None
    url = url.rstrip("/")
    if token is None:
        name = user or input("user: ")
        password = getpass.getpass("password: ")
        label = f"tfkube CLI on {socket.gethostname()}"
        try:
            token = token_by_password(url, name, password, label, setup_token)
        except ServerError as exc:
            raise fail(exc.detail, 1) from None
    try:
        with Client(url, token) as client:
            me = client.me()
    except Exception as exc:
        raise fail(f"cannot sign in to {url}: {exc}", 1) from None
    chosen = team or next(iter(me.teams), None)
    path = save_login(Login(url=url, token=token, team=chosen))
    out.print(
        f"signed in to {url} as {me.name}"
        + (f" (team {chosen})" if chosen else "")
        + f"; saved in {path}. Use --engine server or TFKUBE_ENGINE=server.",
        highlight=False,
    )


def _read_document(path: Path) -> str:
    """A YAML file's text, read no further than the job format's size bound (a larger
    file is then refused by `load_yaml`, naming the bound)."""
    with path.open("rb") as f:
        raw = f.read(MAX_DOCUMENT_BYTES + 1)
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise fail(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _load(path: Path) -> TFJob:
    if not path.is_file():
        raise fail(f"{path}: no such job file")
    return load_job_text(_read_document(path), str(path))


QUICK_FORM = "tfkube.quick_form_args"
"""Where `run` keeps what followed `--` on its command line (`ctx.meta`)."""


class _TrainingArgs(TyperCommand):
    """`run`'s parser: what follows `--` is the training code's arguments (the quick
    form's `args`), never the job file nor an option of tfkube's."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own Context
        if "--" in args:
            at = args.index("--")
            args, ctx.meta[QUICK_FORM] = args[:at], args[at + 1 :]
        return super().parse_args(ctx, args)


def _flag(field: str) -> str:
    """A form field as the quick form's flag (`deadline_seconds` -> `--deadline-seconds`);
    a job field no flag stands for keeps its path."""
    head = field.split(".")[0]
    return "--" + head.replace("_", "-") if head in JobForm.model_fields else field


def _environment(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise fail(f"--env {pair!r}: give NAME=VALUE")
        env[name] = value
    return env


def _job_from_args(job_file: Path | None, quick: dict[str, Any]) -> tuple[TFJob, Path]:
    """The job file's job, or the quick form's (`tfkube.spec.JobForm`, the server's form
    too: errors name the flags). `quick` holds the options given (None: not given)."""
    given = {
        k: v for k, v in quick.items() if v is not None and v is not False and v not in ([], {})
    }
    if job_file is not None:
        if given:
            flags = ", ".join("-- ARGS" if k == "args" else _flag(k) for k in given)
            raise fail(f"give either a job file or the quick form, not both (also gave {flags})")
        return _load(job_file), job_file.resolve().parent
    missing = [_flag(k) for k in ("name", "workers", "code") if k not in given]
    if missing:
        raise fail(
            "give a job file, or the quick form `--name NAME --workers N --ps M --code PATH "
            f"[-- ARGS]`; missing {', '.join(missing)}"
        )
    form = read_form(given, "command line", _flag)
    return form_job(form, "command line", _flag), Path.cwd()


_DATA_FLAGS = {
    "spec.storage.data.source": "--data",
    "spec.storage.data.endpoint": "--data-endpoint",
    "spec.storage.data.shard": "--data-shard",
    "spec.storage.data": "--data",
}


def _with_data(
    job: TFJob, source: str | None, endpoint: str | None, shard: str | None = None
) -> TFJob:
    """The job with `--data`/`--data-endpoint`/`--data-shard` as its data source (checked
    as in a job file; errors name the flags)."""
    if source is None and endpoint is None and shard is None:
        return job
    raw = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    data = raw["spec"].setdefault("storage", {}).setdefault("data", {})
    if source is not None:
        data["source"] = source
    if endpoint is not None:
        data["endpoint"] = endpoint
    if shard is not None:
        data["shard"] = shard
    try:
        return parse_job(raw, "command line")
    except SpecError as exc:
        errors = [FieldError(_DATA_FLAGS.get(e.field, e.field), e.message) for e in exc.errors]
        raise SpecError(errors, exc.source) from None


def _credentials(path: Path | None) -> Credentials | None:
    """`--data-credentials FILE` read (None: the environment's, at submit)."""
    if path is None:
        return None
    try:
        return parse_credentials(path.read_text(), str(path))
    except OSError as exc:
        raise fail(f"--data-credentials: cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise fail(f"--data-credentials: {exc}") from None


def _form_help(field: str) -> str:
    """A quick-form option's help: the form field's own docstring."""
    text = JobForm.model_fields[field].description or field
    return "Quick form: " + (text[0].lower() + text[1:] if text[1:2].islower() else text)


JobFileArg = Annotated[Path | None, typer.Argument(help="A TFJob YAML file.", show_default=False)]
NameOpt = Annotated[str | None, typer.Option("--name", help="Quick form: the job's name.")]
WorkersOpt = Annotated[int | None, typer.Option("--workers", help="Quick form: workers.")]
PsOpt = Annotated[int | None, typer.Option("--ps", help="Quick form: parameter servers.")]
CodeOpt = Annotated[
    str | None, typer.Option("--code", help="Quick form: code folder or .tar.gz URL.")
]
EntrypointOpt = Annotated[
    str | None,
    typer.Option(
        "--entrypoint",
        help=f"Quick form: the script to run (default {contract.DEFAULT_ENTRYPOINT}).",
        show_default=False,
    ),
]
ChiefOpt = Annotated[bool, typer.Option("--chief", help=_form_help("chief"))]
EvaluatorOpt = Annotated[bool, typer.Option("--evaluator", help=_form_help("evaluator"))]
CpuOpt = Annotated[str | None, typer.Option("--cpu", help=_form_help("cpu"))]
MemoryOpt = Annotated[str | None, typer.Option("--memory", help=_form_help("memory"))]
GpuOpt = Annotated[int | None, typer.Option("--gpu", help=_form_help("gpu"))]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option("--env", metavar="NAME=VALUE", help=_form_help("env") + " (repeat it)."),
]
RestartOpt = Annotated[
    RestartPolicy | None, typer.Option("--restart-policy", help=_form_help("restart_policy"))
]
DeadlineOpt = Annotated[
    int | None, typer.Option("--deadline-seconds", help=_form_help("deadline_seconds"))
]
TensorBoardOpt = Annotated[bool, typer.Option("--tensorboard", help=_form_help("tensorboard"))]
DataOpt = Annotated[
    str | None,
    typer.Option(
        "--data",
        "--data-source",
        metavar="s3://BUCKET/PREFIX|hdfs://NAMENODE:PORT/PATH",
        help="Train on the data under this S3 prefix or HDFS path (read over WebHDFS): "
        "staged (and cached) before any replica starts, read-only at $TFKUBE_DATA_DIR "
        "(spec.storage.data.source).",
    ),
]
DataEndpointOpt = Annotated[
    str | None,
    typer.Option(
        "--data-endpoint",
        metavar="URL",
        help="The S3-compatible store's URL, e.g. http://127.0.0.1:8333 (default AWS), or "
        "the NameNode's WebHDFS address (default port 9870) (spec.storage.data.endpoint).",
    ),
]
DataShardOpt = Annotated[
    str | None,
    typer.Option(
        "--data-shard",
        metavar="byWorker",
        help="Worker i of n gets only every n-th file (by name) of the source, in a folder "
        "of its own; PS none, chief all (spec.storage.data.shard).",
    ),
]
DataCredentialsOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-credentials",
        metavar="FILE",
        help="The store's credentials (aws_access_key_id, aws_secret_access_key; for HDFS "
        "hadoop_user_name), instead of AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
        "(HADOOP_USER_NAME); never stored with the job.",
    ),
]


@app.command(cls=_TrainingArgs)
def run(
    ctx: typer.Context,
    job_file: JobFileArg = None,
    name: NameOpt = None,
    workers: WorkersOpt = None,
    ps: PsOpt = None,
    code: CodeOpt = None,
    entrypoint: EntrypointOpt = None,
    chief: ChiefOpt = False,
    evaluator: EvaluatorOpt = False,
    cpu: CpuOpt = None,
    memory: MemoryOpt = None,
    gpu: GpuOpt = None,
    env: EnvOpt = None,
    restart_policy: RestartOpt = None,
    deadline_seconds: DeadlineOpt = None,
    tensorboard: TensorBoardOpt = False,
    data: DataOpt = None,
    data_endpoint: DataEndpointOpt = None,
    data_shard: DataShardOpt = None,
    data_credentials: DataCredentialsOpt = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Start the job and return at once.")
    ] = False,
    replace: Annotated[
        bool, typer.Option("--replace", help="Delete a finished job of the same name first.")
    ] = False,
    show_summary: Annotated[
        bool, typer.Option("--summary", help="Print what the job achieved when it ends.")
    ] = False,
    package_index: Annotated[
        str | None,
        typer.Option(
            "--package-index",
            help="The package index URL (PEP 503 simple API) the code's requirements.txt "
            "installs from (default: PyPI).",
        ),
    ] = None,
) -> None:
    """Run a job on this machine, showing its replicas live. Ctrl-C (or SIGTERM, or a
    closed terminal: SIGHUP) stops every replica; --detach leaves the job running.
    A job file, or the quick form (the server's form too): `--name N --workers W --ps P
    --code DIR`, more options below, and the training code's arguments after `--`."""
    quick = {
        "name": name,
        "workers": workers,
        "ps": ps,
        "code": code,
        "entrypoint": entrypoint,
        "args": list(ctx.meta.get(QUICK_FORM, [])),
        "env": _environment(env or []),
        "chief": chief,
        "evaluator": evaluator,
        "cpu": cpu,
        "memory": memory,
        "gpu": gpu,
        "restart_policy": restart_policy,
        "deadline_seconds": deadline_seconds,
        "tensorboard": tensorboard,
    }
    if package_index is not None:
        try:
            index_target(package_index)
        except ValueError as exc:
            raise fail(f"--package-index: {exc}") from None
    backend = local_backend((package_index,) if package_index else ())
    # A signal may come at any moment: while staging (nothing runs yet), while the job
    # starts (submit stops what it started), while it runs, or twice. Each way every
    # replica is stopped and the exit code is 128+N (`_lifetime.py`).
    with foreground():
        try:
            try:
                job, base = _job_from_args(job_file, quick)
                job = _with_data(job, data, data_endpoint, data_shard)
                view = backend.submit(
                    job, base, replace=replace, data_credentials=_credentials(data_credentials)
                )
            except (SpecError, JobExists) as exc:
                raise fail(str(exc)) from None
            if detach:
                out.print(
                    f"job {view.name} started ({len(view.replicas)} replicas); follow it with "
                    f"`tfkube status {view.name}` or `tfkube logs {view.name} -f`, stop it "
                    f"with `tfkube stop {view.name}`"
                )
                return
            final = _watch(backend, view.name)
        except KeyboardInterrupt as interrupt:
            raise stop_then_exit(interrupt, partial(_stop_started, backend)) from None
    if show_summary or final.phase.terminal:
        for line in summary(final):
            out.print(line, highlight=False)
    raise typer.Exit(final.exit_code)


def _watch(backend: LocalBackend, name: str) -> JobView:
    """Show the job live until it is done (a stop signal: KeyboardInterrupt, for the
    caller)."""
    with Live(console=out, refresh_per_second=4, transient=False, auto_refresh=False) as live:
        view = backend.get(name)
        shown = 0.0
        while not view.done:
            # Poll often (to return as soon as the job ends), draw at most 4 times a
            # second and only on a terminal (elsewhere the final table is enough).
            if out.is_terminal and time.monotonic() - shown >= 0.25:
                live.update(job_panel(view, width=out.width), refresh=True)
                shown = time.monotonic()
            time.sleep(0.05)
            view = backend.get(name)
        view = backend.wait(name)
        live.update(job_panel(view, width=out.width), refresh=True)
    out.line()
    return view


def _stop_started(backend: LocalBackend, interrupt: KeyboardInterrupt) -> None:
    """Stop the jobs this command started (none if the signal came while staging)."""
    if not backend.submitted:
        err.print(f"{describe(interrupt)}: the job had not started; nothing runs")
        return
    for name in backend.submitted:
        err.print(f"{describe(interrupt)}: stopping every replica of {name}")
        try:
            view = backend.stop(name)
        except JobNotFound:
            continue
        out.print(job_panel(view, width=out.width))


@app.command()
def submit(
    ctx: typer.Context,
    job_file: Annotated[Path, typer.Argument(help="A TFJob YAML file (or a Kubeflow TFJob).")],
    engine: EngineOpt = "local",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Start a job and return at once (locally the same as `run --detach`)."""
    if engine == "local" and namespace is None and kubeconfig is None:
        run(ctx, job_file=job_file, detach=True)
        return
    backend = _engine(engine, namespace, kubeconfig)
    try:
        view = backend.submit(_load(job_file), job_file.resolve().parent)
    except (SpecError, JobExists) as exc:
        raise fail(str(exc)) from None
    where = view.extra.get("namespace")
    out.print(
        f"job {view.name} submitted ({len(view.replicas)} replicas)"
        + (f" to namespace {where}" if where else "")
        + f"; follow it with `tfkube status {view.name} --engine {engine}"
        + (f" -n {namespace}`" if namespace else "`"),
        highlight=False,
    )


@app.command()
def validate(job_file: Annotated[Path, typer.Argument(help="A TFJob YAML file.")]) -> None:
    """Check a job file and print it with every default filled in."""
    try:
        job = _load(job_file)
    except SpecError as exc:
        raise fail(str(exc)) from None
    out.print(dump_job(job), end="", highlight=False)


@app.command("list")
def list_jobs(
    engine: EngineOpt = "local", namespace: NamespaceOpt = None, kubeconfig: KubeconfigOpt = None
) -> None:
    """List the jobs (on this machine, or in a Kubernetes namespace)."""
    views = _engine(engine, namespace, kubeconfig).list()
    if not views:
        out.print("no jobs")
        return
    out.print(jobs_table(views))


@app.command()
def status(
    name: Annotated[str, typer.Argument(help="The job's name.")],
    engine: EngineOpt = "local",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Show a job's phase and every replica."""
    try:
        view = _engine(engine, namespace, kubeconfig).get(name)
    except JobNotFound as exc:
        raise fail(str(exc), 1) from None
    out.print(job_panel(view, width=out.width))
    if view.done:
        for line in summary(view, with_result=False):  # the panel shows the result
            out.print(line, highlight=False)


@app.command()
def logs(
    name: Annotated[str, typer.Argument(help="The job's name.")],
    replica: Annotated[
        str | None, typer.Option("--replica", "-r", help="One replica, e.g. worker-1.")
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing.")] = False,
    engine: EngineOpt = "local",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Print a job's logs (every replica, prefixed, or one)."""
    try:
        for line in _engine(engine, namespace, kubeconfig).logs(name, replica, follow):
            print(line, flush=True)
    except (JobNotFound, ValueError) as exc:
        raise fail(str(exc), 1) from None
    except KeyboardInterrupt as interrupt:  # it started nothing: nothing to stop
        raise typer.Exit(exit_code(interrupt)) from None


@app.command()
def scale(
    name: Annotated[str, typer.Argument(help="The job's name.")],
    workers: Annotated[int, typer.Option("--workers", help="How many workers from now on.")],
    engine: EngineOpt = "local",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Change a running job's number of workers (asynchronous PS training): added workers
    join the running job, removed ones (the highest indexes) stop; the PS keep serving and
    nothing restarts."""
    try:
        view = _engine(engine, namespace, kubeconfig).scale(name, workers)
    except JobNotFound as exc:
        raise fail(str(exc), 1) from None
    except SpecError as exc:
        lines = [f"cannot scale job {name}:"] + [f"  {e.field}: {e.message}" for e in exc.errors]
        raise fail("\n".join(lines)) from None
    except TimeoutError as exc:
        raise fail(str(exc), 1) from None
    count = sum(1 for r in view.replicas if r.role == "worker")
    out.print(f"job {name} now has {count} workers ({view.phase.value})", highlight=False)


@app.command()
def stop(
    name: Annotated[str, typer.Argument(help="The job's name.")],
    engine: EngineOpt = "local",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Stop every replica of a job and keep it (its logs, state and outputs) until
    `tfkube delete`."""
    try:
        view = _engine(engine, namespace, kubeconfig).stop(name)
    except JobNotFound as exc:
        raise fail(str(exc), 1) from None
    if view.done:
        reason = f", {view.reason}" if view.reason else ""
        out.print(f"job {name} stopped ({view.phase.value}{reason})", highlight=False)
    else:  # Kubernetes: the operator stops it
        out.print(
            f"job {name}: stop requested (still {view.phase.value}); follow it with "
            f"`tfkube status {name}`",
            highlight=False,
        )


@app.command()
def delete(
    name: Annotated[str, typer.Argument(help="The job's name.")],
    engine: EngineOpt = "local",
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
) -> None:
    """Stop every replica of a job and remove it (with everything it created)."""
    try:
        view = _engine(engine, namespace, kubeconfig).delete(name)
    except JobNotFound as exc:
        raise fail(str(exc), 1) from None
    out.print(f"job {name} deleted (it was {view.phase.value})")


# -- Kubernetes manifests (render, install) ---------------------------------------------


def _read_secret(path: Path) -> dict[str, object]:
    from tfkube.spec import load_yaml

    if not path.is_file():
        raise fail(
            f"{path}: no such file (give a Secret manifest, e.g. from `kubectl get secret -o yaml`)"
        )
    try:
        data = load_yaml(_read_document(path), str(path))
    except SpecError as exc:
        raise fail(f"{path}: " + "; ".join(e.message for e in exc.errors)) from None
    if not isinstance(data, dict) or data.get("kind") != "Secret":
        raise fail(f"{path}: not a Secret manifest")
    return data


def _pack_code(job: TFJob, base: Path) -> bytes:
    import tempfile

    from tfkube.engines import prepare_artifact

    with tempfile.TemporaryDirectory(prefix="tfkube-render-") as tmp:
        artifact = prepare_artifact(job, base, Path(tmp))
        return artifact.path.read_bytes()


@app.command()
def render(
    job_file: Annotated[Path, typer.Argument(help="A TFJob YAML file.")],
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace", "-n", help="Target namespace (default: the job's, or default)."
        ),
    ] = None,
    pack_code: Annotated[
        bool,
        typer.Option(
            "--pack-code",
            help="Ship a small local code folder (at most 768 KiB packed) in a ConfigMap.",
        ),
    ] = False,
    registry_secret: Annotated[
        Path | None,
        typer.Option(
            "--registry-secret",
            help="A Secret manifest (image-pull credentials) to copy into the job's namespace.",
        ),
    ] = None,
    include_namespace: Annotated[
        bool, typer.Option("--include-namespace", help="Also emit the Namespace object.")
    ] = False,
    venv_cache_host_path: Annotated[
        str | None,
        typer.Option(
            "--venv-cache-host-path",
            help="A node folder where pods share the environments built from the code's "
            "requirements.txt (hostPath <folder>/<namespace>; default: one per pod). A "
            "hostPath volume needs a namespace without Pod Security enforcement: baseline "
            "and restricted namespaces (tfkube server teams) refuse it.",
        ),
    ] = None,
) -> None:
    """Print the job's Kubernetes objects as YAML for `kubectl apply -f -` (no operator
    needed; nothing is contacted)."""
    from tfkube.render import MAX_CODE_CONFIGMAP_BYTES, RenderOptions, dump_yaml, render_job

    try:
        job = _load(job_file)
        code: bytes | None = None
        if pack_code and job.spec.code is not None and not job.spec.code.is_url:
            code = _pack_code(job, job_file.resolve().parent)
            err.print(
                f"packed {job.spec.code.source!r} into ConfigMap {job.name}-code "
                f"({len(code) // 1024} KiB of at most {MAX_CODE_CONFIGMAP_BYTES // 1024} KiB)",
                highlight=False,
            )
        options = RenderOptions(
            namespace=namespace or job.metadata.namespace or "default",
            registry_secret=_read_secret(registry_secret) if registry_secret else None,
            code_archive=code,
            include_namespace=include_namespace,
            venv_cache_host_path=venv_cache_host_path,
        )
        objects = render_job(job, options)
    except SpecError as exc:
        raise fail(str(exc)) from None
    if job.spec.code is not None and job.spec.code.is_url and not job.spec.code.sha256:
        err.print(
            "warning: spec.code.sha256 is not set, so replicas cannot verify the code they "
            "download; add it (sha256sum of the .tar.gz)",
            highlight=False,
        )
    print(dump_yaml(objects), end="")


@app.command()
def install(
    kubeconfig: Annotated[
        Path | None,
        typer.Option(
            "--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config)."
        ),
    ] = None,
    context: Annotated[str | None, typer.Option("--context", help="Kubeconfig context.")] = None,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="The operator's namespace.")
    ] = "tfkube-system",
    image: Annotated[str | None, typer.Option("--image", help="The operator's image.")] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Let the API server check everything; store nothing."),
    ] = False,
    print_only: Annotated[
        bool, typer.Option("--print", help="Print the manifests instead; contact nothing.")
    ] = False,
    write_manifests: Annotated[
        Path | None,
        typer.Option("--write-manifests", help="Write deploy/*.yaml into this folder instead."),
    ] = None,
    server: Annotated[
        bool,
        typer.Option(
            "--server",
            help="Also the platform server (tfkube server --engine kubernetes): its "
            "Deployment, Service, data claim and RBAC, in the same namespace and image.",
        ),
    ] = False,
    storage_class: Annotated[
        str | None,
        typer.Option(
            "--storage-class",
            help="--server: the StorageClass of the data claim it makes (default: the "
            "cluster's default class; without one, give this or --data-claim).",
        ),
    ] = None,
    storage_size: Annotated[
        str, typer.Option("--storage-size", help="--server: the data claim's size.")
    ] = "20Gi",
    data_claim: Annotated[
        str | None,
        typer.Option(
            "--data-claim",
            help="--server: an existing claim in the namespace for its data (none is made).",
        ),
    ] = None,
    database: Annotated[
        str,
        typer.Option(
            "--database",
            help="--server: its database: sqlite (on the data claim), postgres (PostgreSQL "
            "in a pod of its own, a generated password in the Secret tfkube-postgres) or "
            "external (the postgresql:// URL in the Secret tfkube-server-database, key url).",
        ),
    ] = "sqlite",
    database_claim: Annotated[
        str | None,
        typer.Option(
            "--database-claim",
            help="--database postgres: an existing claim in the namespace for PostgreSQL's "
            "data (none is made; default: a claim of --storage-class or the default class).",
        ),
    ] = None,
    database_size: Annotated[
        str,
        typer.Option("--database-size", help="--database postgres: the size of its claim."),
    ] = "10Gi",
    postgres_image: Annotated[
        str | None,
        typer.Option(
            "--postgres-image",
            help="--database postgres: PostgreSQL's image (default: tfkube's, "
            "ghcr.io/tfkube/postgres:15-bookworm).",
        ),
    ] = None,
    logs_storage_class: Annotated[
        str | None,
        typer.Option(
            "--logs-storage-class",
            help="Jobs whose spec names no logs storage get a new logs claim of this "
            "StorageClass (default: none; their logs stay in their pods).",
        ),
    ] = None,
    logs_size: Annotated[
        str, typer.Option("--logs-size", help="The size of those logs claims.")
    ] = "10Gi",
    logs_claim: Annotated[
        str | None,
        typer.Option(
            "--logs-claim",
            help="Jobs whose spec names no logs storage write their logs in a folder of "
            "this existing ReadWriteMany claim of their namespace.",
        ),
    ] = None,
    outputs_claim: Annotated[
        str | None,
        typer.Option(
            "--outputs-claim",
            help="--server: the ReadWriteMany claim jobs keep their logs on (one in every "
            "team namespace, and one of the same share in this namespace; docs/kubernetes.md).",
        ),
    ] = None,
    public_url: Annotated[
        str | None,
        typer.Option("--public-url", help="--server: how people reach it, e.g. https://..."),
    ] = None,
    node_selector: Annotated[
        list[str] | None,
        typer.Option(
            "--node-selector",
            help="KEY=VALUE (repeatable): the nodes the operator (and --server's server) run on.",
        ),
    ] = None,
    toleration: Annotated[
        list[str] | None,
        typer.Option(
            "--toleration",
            help="KEY[=VALUE][:EFFECT] (repeatable): a taint the operator (and --server's "
            "server) tolerate, e.g. a node pool kept for the platform.",
        ),
    ] = None,
    notebook_node_selector: Annotated[
        list[str] | None,
        typer.Option(
            "--notebook-node-selector",
            help="--server: KEY=VALUE (repeatable), the nodes the server puts notebooks on.",
        ),
    ] = None,
    notebook_toleration: Annotated[
        list[str] | None,
        typer.Option(
            "--notebook-toleration",
            help="--server: KEY[=VALUE][:EFFECT] (repeatable), a taint notebooks tolerate.",
        ),
    ] = None,
    ingress_from: Annotated[
        list[str] | None,
        typer.Option(
            "--ingress-from",
            help="--server: CIDR (repeatable) outside the pod network that may reach team "
            "pods: where the API server's service proxy connects from, when not from the "
            "API servers' own addresses (default).",
        ),
    ] = None,
    egress_deny: Annotated[
        list[str] | None,
        typer.Option(
            "--egress-deny",
            help="--server: CIDR (repeatable) team pods may not connect to (default: the "
            "clouds' metadata services, 169.254.169.254/32 and fd00:ec2::254/128; `none`: "
            "egress is not limited).",
        ),
    ] = None,
    data_cache: Annotated[
        bool,
        typer.Option(
            "--data-cache/--no-data-cache",
            help="--server: a node data cache on every node (a DaemonSet with a hostPath "
            "folder, docs/security.md) that replicas fetch their data through.",
        ),
    ] = False,
    data_cache_path: Annotated[
        str,
        typer.Option("--data-cache-path", help="--server: the cache's folder on each node."),
    ] = "/var/lib/tfkube-datacache",
    data_cache_size: Annotated[
        str,
        typer.Option(
            "--data-cache-size", help="--server: at most this much on each node (e.g. 20GiB)."
        ),
    ] = "20GiB",
) -> None:
    """Install (or upgrade) the TFJob CRD, RBAC and the operator on a cluster; with
    --server, the platform server too."""
    from tfkube.datacache import parse_size
    from tfkube.render import (
        OPERATOR_IMAGE,
        POSTGRES_IMAGE,
        DataCacheInstall,
        Placement,
        ServerInstall,
        StorageDefaults,
        TenantNetwork,
        datacache_url,
        deploy_file_texts,
        dump_yaml,
        install_manifests,
        operator_manifests,
        parse_egress_deny,
        parse_node_selector,
        parse_toleration,
        postgres_secret_command,
        server_manifests,
    )

    chosen_image = image or OPERATOR_IMAGE
    try:
        placement = Placement(
            node_selector=parse_node_selector(node_selector or []),
            tolerations=tuple(parse_toleration(t) for t in toleration or []),
        )
        notebook_placement = Placement(
            node_selector=parse_node_selector(
                notebook_node_selector or [], "--notebook-node-selector"
            ),
            tolerations=tuple(
                parse_toleration(t, "--notebook-toleration") for t in notebook_toleration or []
            ),
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    try:
        parse_size(data_cache_size)
    except ValueError as exc:
        raise fail(f"--data-cache-size: {exc}") from None
    try:
        TenantNetwork(namespace, tuple(ingress_from or ()))
    except ValueError as exc:
        raise fail(f"--ingress-from: {exc}") from None
    try:
        denied = parse_egress_deny(egress_deny) if egress_deny else None
        TenantNetwork(namespace, denied=denied or ())
    except ValueError as exc:
        raise fail(f"--egress-deny: {exc}") from None
    try:
        server_options = (
            ServerInstall(
                storage_class=storage_class,
                storage_size=storage_size,
                data_claim=data_claim,
                outputs_claim=outputs_claim,
                public_url=public_url,
                placement=placement,
                database=database,
                database_claim=database_claim,
                database_size=database_size,
                postgres_image=postgres_image or POSTGRES_IMAGE,
                notebook_placement=notebook_placement,
                ingress_from=tuple(ingress_from or ()),
                egress_deny=denied,
                data_cache=DataCacheInstall(data_cache_path, data_cache_size)
                if data_cache
                else None,
            )
            if server
            else None
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    database_flags = database != "sqlite" or database_claim or postgres_image
    notebook_flags = notebook_node_selector or notebook_toleration
    if server_options is None and (
        storage_class
        or data_claim
        or outputs_claim
        or public_url
        or database_flags
        or notebook_flags
        or ingress_from
        or egress_deny
    ):
        raise fail(
            "--storage-class, --data-claim, --outputs-claim, --public-url, "
            "--notebook-node-selector, --notebook-toleration, --ingress-from, --egress-deny "
            "and --database "
            "(with --database-claim, --postgres-image) go with --server"
        )
    secret_note = (
        f"# Before applying: PostgreSQL's password, in a Secret of your own (`tfkube install`\n"
        f"# makes it itself): {postgres_secret_command(namespace)}\n"
        if server_options is not None and server_options.database == "postgres"
        else ""
    )
    try:
        jobs_storage = StorageDefaults(
            logs_storage_class=logs_storage_class, logs_claim=logs_claim, logs_size=logs_size
        )
    except ValueError:
        raise fail("give --logs-storage-class or --logs-claim, not both") from None
    if write_manifests is not None:
        write_manifests.mkdir(parents=True, exist_ok=True)
        for name, text in deploy_file_texts().items():
            (write_manifests / name).write_text(text)
            out.print(f"wrote {write_manifests / name}", highlight=False)
        if server_options is not None:
            header = (
                f"# The platform server (`tfkube install --server --database "
                f"{server_options.database}`), namespace {namespace}.\n{secret_note}"
            )
            target = write_manifests / "server.yaml"
            objects = server_manifests(namespace, chosen_image, server_options)
            if server_options.data_cache:  # the operator then names the cache to replicas
                header += (
                    "# With the node data cache: the operator's Deployment again, naming it.\n"
                )
                objects += operator_manifests(
                    namespace, chosen_image, jobs_storage, placement, datacache_url(namespace)
                )
            target.write_text(dump_yaml(objects, header))
            out.print(f"wrote {target}", highlight=False)
        return
    if print_only:
        cache = datacache_url(namespace) if server_options and server_options.data_cache else None
        objects = install_manifests(namespace, chosen_image, jobs_storage, placement, cache)
        if server_options is not None:
            objects += server_manifests(namespace, chosen_image, server_options)
        print(dump_yaml(objects, secret_note), end="")
        return
    try:
        from tfkube.engines.kubernetes import InstallError, api_client_from
        from tfkube.engines.kubernetes import install as install_all
    except ImportError as exc:
        raise fail(f"{exc}; install the extra: pip install 'tfkube[kubernetes]'") from None
    try:
        api = api_client_from(kubeconfig, context)
    except Exception as exc:  # kubeconfig errors come in many types
        raise fail(f"cannot load the kubeconfig: {exc}") from None
    try:
        install_all(
            api,
            namespace=namespace,
            image=chosen_image,
            dry_run=dry_run,
            progress=lambda applied: out.print(str(applied), highlight=False),
            server=server_options,
            storage=jobs_storage,
            say=lambda line: out.print(line, highlight=False),
            placement=placement,
        )
    except InstallError as exc:
        raise fail(str(exc), 1) from None
    finally:
        api.close()
    if not dry_run:
        out.print("installed; `kubectl get tfj -A` lists TFJobs", highlight=False)
        if server_options is not None:
            out.print(
                f"the server: `kubectl -n {namespace} logs deploy/tfkube-server` prints its "
                f"one-time set-up link; reach it with `kubectl -n {namespace} port-forward "
                "svc/tfkube-server 8470` (docs/kubernetes.md)",
                highlight=False,
            )
            if server_options.database == "postgres":
                out.print(
                    f"PostgreSQL: `kubectl -n {namespace} get pods -l "
                    "app.kubernetes.io/component=database`; its password is in the Secret "
                    "tfkube-postgres; back it up with pg_dump through kubectl exec "
                    "(docs/kubernetes.md, 'Backing up')",
                    highlight=False,
                )


@app.command("operator")
def operator_command(
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Watch this namespace (repeatable)."),
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Watch every namespace (default).")
    ] = False,
    kubeconfig: Annotated[
        Path | None,
        typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, in-cluster)."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    max_pods_per_job: Annotated[
        int | None,
        typer.Option(
            "--max-pods-per-job",
            help="At most this many replicas of a role per Indexed Job; a role with more is "
            "several Jobs, created side by side (default: $TFKUBE_MAX_PODS_PER_JOB or 500).",
        ),
    ] = None,
) -> None:
    """Run the TFJob operator: reconcile TFJobs in the cluster until Ctrl-C, SIGTERM or
    SIGHUP (the jobs carry on: they are the cluster's)."""
    from tfkube.operator import OperatorSettings, run_operator

    if namespace and all_namespaces:
        raise fail("give --namespace or --all-namespaces, not both")
    try:
        settings = OperatorSettings.read(
            namespaces=tuple(namespace or ()),
            kubeconfig=kubeconfig,
            verbose=verbose,
            max_pods_per_job=max_pods_per_job,
        )
    except ValueError as exc:  # its environment contradicts itself
        raise fail(f"the operator's settings: {exc}") from None
    # Until SIGINT, SIGTERM or SIGHUP: the jobs it reconciles are the cluster's and carry
    # on; the next operator takes them over.
    run_service(lambda: run_operator(settings))
