"""Benchmark: tfkube's operator side by side with Kubeflow's training operator v1.9.4 and
with the plain-client floor, each run on a fresh control plane, the same fake nodes, the
same jobs.

    nice .venv/bin/python benchmarks/vs_kubeflow/run.py [--sizes 1x2,10x100,100x1000]
        [--runners floor,floor-one-service,floor-jobs,floor-adopt,tfkube,kubeflow,
                   kubeflow-running,kubeflow-tuned] [--duration 30s] [--json]
        [--cpus 0.5 [--runner-unquoted]]   # everything within a CPU quota (_cpu.py)

Needs the control plane (`make kube-bins`) and Kubeflow's operator
(`tools/kubeflow/build.sh`). A size is PSxWORKERS. Runners, one at a time, each on a control
plane started for it and stopped after it, so that no run starts where another left the
control plane (`--shared-plane`: one for all, a fresh namespace per run, deleted and waited
for before the next; runs Q11 in docs/benchmarks.md):

  floor             floor.py: a plain client creating the same pods (tfkube's rendered pod
                    templates) with up to --floor-parallel requests in flight, deleting the
                    PS pods once it sees every worker succeed. No operator can beat it.
  floor-one-service the floor with the job's one headless Service for every replica, as
                    tfkube rendered jobs before 2026-12-04 (`RenderOptions.one_service`),
                    instead of one per Indexed Job: what the layout costs the control plane.
  floor-jobs        the floor creating tfkube's role Jobs as rendered (no pods): Kubernetes'
                    Job controller makes them, so tfkube's cost above it is its own.
  floor-adopt       the floor's pods made as orphans, at the floor's pace, then tfkube's role
                    Jobs (selecting them by a label of their own) adopting them: the Job
                    controller's slow start skipped, its guarantees kept after.
  tfkube            `tfkube operator` (this checkout), the job submitted by KubernetesBackend.
  kubeflow          Kubeflow at its defaults: --controller-threads 1, QPS 20, burst 30,
                    development logging; the job with cleanPodPolicy None (its default).
  kubeflow-running  the same, with cleanPodPolicy Running (it deletes the PS at the end).
  kubeflow-tuned    --controller-threads 10, QPS 500, burst 1000, cleanPodPolicy Running.

Every job: N PS (kept running by the fake kubelet until deleted), M workers that succeed
`--duration` after they start, success policy AllWorkers, restartPolicy Never; the fake
kubelet (KWOK) starts as many pods at once as there are fake nodes. Measured from
submit, by WATCHES (pods and the job object; nothing is polled), printed as it goes:
  all running     every replica pod has been seen Running (or past it) at least once
  workers done    the last worker seen Succeeded
  succeeded       the job object says so (the floor: workers done, its own decision)
  PS gone         no PS pod left, not even terminating (never, under cleanPodPolicy None)
and from the API server's audit log (every actor has its own ServiceAccount token): the
requests each actor made and the objects each created in the run's namespace; from /proc:
the operator's CPU seconds (submit to end) and peak RSS, and each control-plane
component's CPU seconds over the run.

Everything runs inside a private network namespace with only a loopback interface (the
benchmark re-executes itself under `unshare --net --mount`): Kubeflow's webhook server binds
every interface and cannot be told otherwise, and its certificate directory
(/tmp/k8s-webhook-server, hard-coded) is a private tmpfs there.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import _cpu
import yaml
from _api import Api, ApiError, Identity
from _audit import AuditLog, Requests, apiserver_args
from _pprof import APISERVER_ARGS, control_plane_profiles
from kubernetes import config

from tfkube.engines._artifact import prepare_artifact
from tfkube.engines.kubernetes import KubernetesBackend
from tfkube.kube.names import INDEX_KEY, JOB_NAME_KEY, JOB_UID_KEY
from tfkube.render import DEFAULT_MAX_PODS_PER_JOB, RenderOptions, crd, render_job
from tfkube.spec import DEFAULT_IMAGE, parse_job

ADOPT_KEY = "tfkube.io/pod-set"
"""floor-adopt's Jobs select their pods by this label (manualSelector)."""
ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
KUBEFLOW_BUILD = ROOT / "tools" / "kubeflow" / "build.sh"
WEBHOOK_CERTS = Path("/tmp/k8s-webhook-server")  # hard-coded in Kubeflow's operator
ROLE_LABEL = "tfkube.io/replica-type"  # the fake-pod contract's label (docs/testing.md)
DURATION_ANNOTATION = "tfkube.io/fake-duration"
BENCH_NS = "tfkube-bench"
JOB = "job"
ISOLATED = "TFKUBE_BENCH_ISOLATED"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- sizes, jobs


@dataclass(frozen=True)
class Size:
    ps: int
    workers: int

    @classmethod
    def parse(cls, text: str) -> Size:
        ps, workers = text.lower().split("x")
        return cls(int(ps), int(workers))

    @property
    def total(self) -> int:
        return self.ps + self.workers

    def __str__(self) -> str:
        return f"{self.ps}x{self.workers}"


def tfkube_spec(size: Size, duration: str) -> dict[str, Any]:
    return {
        "apiVersion": "tfkube.io/v1alpha1",
        "kind": "TFJob",
        "metadata": {"name": JOB},
        "spec": {
            "replicas": {
                "ps": {"replicas": size.ps},
                "worker": {
                    "replicas": size.workers,
                    "annotations": {DURATION_ANNOTATION: duration},
                },
            },
            "code": {"source": "./code"},
            "runPolicy": {"successPolicy": "AllWorkers", "cleanPodPolicy": "Running"},
        },
    }


def kubeflow_spec(size: Size, duration: str, clean: str) -> dict[str, Any]:
    """The same job for Kubeflow: same image, the fake-pod contract's label and annotation
    on the pod templates (KWOK keys on them), restartPolicy Never, success AllWorkers."""

    def replica(count: int, role: str, annotations: dict[str, str]) -> dict[str, Any]:
        container = {
            "name": "tensorflow",
            "image": DEFAULT_IMAGE,
            "command": ["python", "/code/train.py"],
        }
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"labels": {ROLE_LABEL: role}, "annotations": annotations},
                "spec": {"containers": [container]},
            },
        }

    run_policy = {} if clean == "None" else {"cleanPodPolicy": clean}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": JOB},
        "spec": {
            "runPolicy": run_policy,
            "successPolicy": "AllWorkers",
            "tfReplicaSpecs": {
                "PS": replica(size.ps, "ps", {}),
                "Worker": replica(size.workers, "worker", {DURATION_ANNOTATION: duration}),
            },
        },
    }


def floor_objects(
    size: Size,
    duration: str,
    namespace: str,
    code: Path,
    one_service: bool = False,
    jobs: bool = False,
    max_pods_per_job: int = DEFAULT_MAX_PODS_PER_JOB,
    adopt: bool = False,
) -> list[dict[str, Any]]:
    """What tfkube would make, made by hand: its shared objects (its Services among them),
    and one pod per replica from its role Jobs' templates, with the labels the Job
    controller would give it (its Job's name, which the Job's Service selects, and a uid:
    eight labels, as tfkube's pods have). With `jobs`: the role Jobs themselves instead of
    their pods. With `adopt`: both, each pod an orphan its Job adopts (the Job selects
    them by a label of its own, `manualSelector`; adopting a pod, the Job controller adds
    its tracking finalizer: an orphan with one would have it removed), the pods first."""
    job = parse_job(tfkube_spec(size, duration))
    with tempfile.TemporaryDirectory(prefix="tfkube-floor-") as tmp:
        archive = prepare_artifact(job, code.parent, Path(tmp)).path.read_bytes()
    options = RenderOptions(
        namespace=namespace,
        managed=True,
        code_archive=archive,
        one_service=one_service,
        max_pods_per_job=max_pods_per_job,
    )
    rendered = render_job(job, options)
    if jobs:
        return rendered
    out = [o for o in rendered if o["kind"] != "Job"]
    adopters = []
    for role_job in (o for o in rendered if o["kind"] == "Job"):
        template = role_job["spec"]["template"]
        job_name = role_job["metadata"]["name"]
        uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{namespace}.{job_name}"))
        controller = {
            JOB_NAME_KEY: job_name,
            "job-name": job_name,
            JOB_UID_KEY: uid,
            "controller-uid": uid,
        }
        if adopt:
            controller = {JOB_NAME_KEY: job_name, "job-name": job_name, ADOPT_KEY: uid}
            template = {
                **template,
                "metadata": {
                    **template["metadata"],
                    "labels": {**template["metadata"].get("labels", {}), **controller},
                },
            }
            spec = {
                **role_job["spec"],
                "manualSelector": True,
                "selector": {"matchLabels": {ADOPT_KEY: uid}},
                "template": template,
            }
            adopters.append({**role_job, "spec": spec})
        for index in range(role_job["spec"]["completions"]):
            name = f"{role_job['metadata']['name']}-{index}"
            meta = template["metadata"]
            spec = {**template["spec"], "hostname": name}
            container = dict(spec["containers"][0])
            container["env"] = [
                *container["env"],
                {"name": "JOB_COMPLETION_INDEX", "value": str(index)},
            ]
            spec["containers"] = [container]
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "labels": {
                            **meta.get("labels", {}),
                            **controller,
                            INDEX_KEY: str(index),
                        },
                        "annotations": {**meta.get("annotations", {}), INDEX_KEY: str(index)},
                    },
                    "spec": spec,
                }
            )
    return out + adopters


# --------------------------------------------------------------------------- processes


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process (its threads included)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return math.nan


def stop(popen: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM, then SIGKILL: only the process this benchmark started."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(grace)
    if popen.poll() is None:
        popen.kill()
        popen.wait()


def cluster_module() -> ModuleType:
    name = "tfkube_tools_kube_cluster"
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "kube" / "cluster.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- the run's context


@dataclass
class Context:
    args: argparse.Namespace
    work: Path
    cluster: Any
    identities: dict[str, Identity]
    kubeconfigs: dict[str, Path]
    audit: AuditLog
    code: Path
    kubeflow_bin: Path | None = None

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        return self.cluster.api(method, path, body)

    def control_plane(self) -> dict[str, int]:
        return {p.name: p.pid for p in self.cluster.state.procs}


def setup(args: argparse.Namespace, work: Path) -> Context:
    kube = cluster_module()
    biggest = max(s.total for s in args.sizes)
    per_node = 1000
    count = args.nodes or max(3, math.ceil(biggest / per_node) + 1)
    nodes = [
        kube.NodeSpec(
            f"tfkube-cpu-{i}",
            f"127.0.1.{i + 1}",
            cpu="100000",
            memory="100000Gi",
            pods=str(per_node),
        )
        for i in range(count)
    ]
    kwok = work / "kwok.yaml"
    kwok.write_text(
        "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n"
        # as many pods started at once as there are nodes, as a kubelet per node would
        f"  podPlayStageParallelism: {args.kwok_parallelism or count}\n"
    )
    cluster = kube.Cluster(
        nodes=nodes,
        die_with_parent=True,
        apiserver_args=apiserver_args(work) + (APISERVER_ARGS if args.profile else ()),
        kwok_args=(f"--config={kwok}",),
    )
    t = time.monotonic()
    state = cluster.start()
    log(f"control plane ready in {time.monotonic() - t:.1f}s: {count} fake nodes x {per_node} pods")
    identities, kubeconfigs = {}, {}
    cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": BENCH_NS}})
    for name in ("bench", "floor", "tfkube-operator", "kubeflow-operator"):
        cluster.api(
            "POST", f"/api/v1/namespaces/{BENCH_NS}/serviceaccounts", {"metadata": {"name": name}}
        )
        cluster.api(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": f"bench-{name}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": BENCH_NS}],
            },
        )
        token = cluster.api(
            "POST",
            f"/api/v1/namespaces/{BENCH_NS}/serviceaccounts/{name}/token",
            {"spec": {"expirationSeconds": 48 * 3600}},
        )["status"]["token"]
        identities[name] = Identity(name, state.server, token, state.ca_file)
        kubeconfigs[name] = identities[name].write_kubeconfig(work / f"{name}.kubeconfig")
    code = work / "code"
    code.mkdir()
    (code / "run.sh").write_text("#!/bin/sh\necho training\n")
    ctx = Context(args, work, cluster, identities, kubeconfigs, AuditLog(work / "audit.log"), code)
    install_crds(ctx)
    return ctx


def install_crds(ctx: Context) -> None:
    crds = [crd()]
    if any(r.startswith("kubeflow") for r in ctx.args.runners):
        ctx.kubeflow_bin = Path(
            subprocess.run(
                [str(KUBEFLOW_BUILD), "--print-bin"], check=True, capture_output=True, text=True
            ).stdout.strip()
        )
        subprocess.run([str(KUBEFLOW_BUILD), "--check"], check=True)
        path = subprocess.run(
            [str(KUBEFLOW_BUILD), "--print-crd"], check=True, capture_output=True, text=True
        )
        crds.append(yaml.safe_load(Path(path.stdout.strip()).read_text()))
        ctx.admin("POST", "/api/v1/namespaces", {"metadata": {"name": "kubeflow"}})
        # Its certificate rotator exits at once unless this Secret exists; it fills it.
        ctx.admin(
            "POST",
            "/api/v1/namespaces/kubeflow/secrets",
            {"metadata": {"name": "training-operator-webhook-cert"}},
        )
    for obj in crds:
        ctx.admin("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", obj)
    for obj in crds:
        name = obj["metadata"]["name"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = ctx.admin(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
            conds = {
                c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []
            }
            if conds.get("Established") == "True":
                break
            time.sleep(0.2)


def bind_volumes(ctx: Context, namespace: str) -> list[str]:
    """tfkube's two claims (data, logs) pre-bound to volumes: there is no provisioner."""
    names = []
    for which in ("data", "logs"):
        name = f"{namespace}-{which}"
        ctx.admin(
            "POST",
            "/api/v1/persistentvolumes",
            {
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "100Gi"},
                    "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/tmp/tfkube-bench/{namespace}"},
                    "claimRef": {"namespace": namespace, "name": f"{JOB}-{which}"},
                },
            },
        )
        names.append(name)
    return names


# --------------------------------------------------------------------------- runners


class Runner:
    """One operator (or the floor): started before the clock, given the job at t0."""

    name = ""
    operator = ""
    """Its ServiceAccount: whose requests are the operator's."""
    volumes = False
    """Pre-bind tfkube's claims."""
    job_path: str | None = None

    def __init__(self, ctx: Context, namespace: str, size: Size) -> None:
        self.ctx, self.namespace, self.size = ctx, namespace, size
        self.popen: subprocess.Popen[bytes] | None = None
        self.log_path = ctx.work / f"{namespace}.log"

    def start(self) -> subprocess.Popen[bytes]:
        raise NotImplementedError

    async def submit(self) -> None:
        raise NotImplementedError

    def outcome(self, obj: dict[str, Any]) -> str | None:
        """The job object's verdict: Succeeded, Failed, or None while it runs."""
        return None

    def _spawn(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as out:
            self.popen = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, **kwargs
            )
        _cpu.release(self.popen.pid)  # with --cpus N --runner-unquoted
        return self.popen

    def _log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class TfkubeRunner(Runner):
    name = "tfkube"
    operator = "tfkube-operator"
    volumes = True

    def start(self) -> subprocess.Popen[bytes]:
        kubeconfig = self.ctx.kubeconfigs["tfkube-operator"]
        argv = [sys.executable, "-m", "tfkube", "operator", "--kubeconfig", str(kubeconfig)]
        argv += ["--max-pods-per-job", str(self.ctx.args.max_pods_per_job)]
        popen = self._spawn([*argv, "--namespace", self.namespace])
        wait_until("tfkube operator ready", lambda: "watching" in self._log_text(), popen)
        time.sleep(1.0)  # kopf's first listings
        return popen

    async def submit(self) -> None:
        client = config.new_client_from_config(config_file=str(self.ctx.kubeconfigs["bench"]))
        backend = KubernetesBackend(api_client=client, namespace=self.namespace)
        job = parse_job(tfkube_spec(self.size, self.ctx.args.duration))
        await asyncio.to_thread(backend.submit, job, self.ctx.code.parent)

    @property
    def job_path(self) -> str:  # type: ignore[override]
        return f"/apis/tfkube.io/v1alpha1/namespaces/{self.namespace}/tfjobs"

    def outcome(self, obj: dict[str, Any]) -> str | None:
        phase = (obj.get("status") or {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None


class KubeflowRunner(Runner):
    operator = "kubeflow-operator"

    def __init__(self, ctx: Context, namespace: str, size: Size, variant: str) -> None:
        super().__init__(ctx, namespace, size)
        self.name = variant
        self.clean = "None" if variant == "kubeflow" else "Running"
        self.flags = (
            ["--controller-threads=10", "--kube-api-qps=500", "--kube-api-burst=1000"]
            if variant == "kubeflow-tuned"
            else []
        )

    def start(self) -> subprocess.Popen[bytes]:
        kube = cluster_module()
        health, metrics, webhook = kube.free_port(), kube.free_port(), kube.free_port()
        assert self.ctx.kubeflow_bin is not None
        popen = self._spawn(
            [
                str(self.ctx.kubeflow_bin),
                f"--kubeconfig={self.ctx.kubeconfigs['kubeflow-operator']}",
                "--enable-scheme=tfjob",
                f"--namespace={self.namespace}",
                "--leader-elect=false",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                f"--metrics-bind-address=127.0.0.1:{metrics}",
                f"--webhook-server-port={webhook}",
                *self.flags,
            ],
            env={**os.environ, "MY_POD_NAMESPACE": "kubeflow"},
        )
        wait_until("Kubeflow's webhook certificate", self._copy_certificate, popen)
        wait_until(
            "Kubeflow operator /readyz",
            lambda: _http_ok(f"http://127.0.0.1:{health}/readyz"),
            popen,
        )
        return popen

    def _copy_certificate(self) -> bool:
        """Its rotator fills the Secret but waits for the files a mounted Secret would give."""
        secret = self.ctx.admin(
            "GET", "/api/v1/namespaces/kubeflow/secrets/training-operator-webhook-cert"
        )
        data = secret.get("data") or {}
        if not data.get("tls.crt") or not data.get("tls.key"):
            return False
        certs = WEBHOOK_CERTS / "serving-certs"
        certs.mkdir(parents=True, exist_ok=True)
        for key in ("tls.crt", "tls.key"):
            (certs / key).write_bytes(base64.b64decode(data[key]))
        return True

    async def submit(self) -> None:
        body = kubeflow_spec(self.size, self.ctx.args.duration, self.clean)
        async with Api(self.ctx.identities["bench"]) as api:
            await api.request("POST", self.job_path, body=body)

    @property
    def job_path(self) -> str:  # type: ignore[override]
        return f"/apis/kubeflow.org/v1/namespaces/{self.namespace}/tfjobs"

    def outcome(self, obj: dict[str, Any]) -> str | None:
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") in ("Succeeded", "Failed") and cond.get("status") == "True":
                return str(cond["type"])
        return None


class FloorRunner(Runner):
    name = "floor"
    operator = "floor"
    volumes = True
    one_service = False
    jobs = False
    adopt = False

    def start(self) -> subprocess.Popen[bytes]:
        args = (self.size, self.ctx.args.duration, self.namespace, self.ctx.code)
        per_job = self.ctx.args.max_pods_per_job
        objects = floor_objects(
            *args,
            one_service=self.one_service,
            jobs=self.jobs,
            max_pods_per_job=per_job,
            adopt=self.adopt,
        )
        path = self.ctx.work / f"{self.namespace}-objects.json"
        path.write_text(json.dumps(objects))
        argv = [
            sys.executable,
            str(HERE / "floor.py"),
            "--kubeconfig",
            str(self.ctx.kubeconfigs["floor"]),
        ]
        argv += ["--namespace", self.namespace, "--objects", str(path)]
        argv += ["--parallel", str(self.ctx.args.floor_parallel)]
        popen = self._spawn(argv, stdin=subprocess.PIPE)
        wait_until("floor client ready", lambda: "ready" in self._log_text(), popen)
        return popen

    async def submit(self) -> None:
        assert self.popen is not None
        assert self.popen.stdin is not None
        self.popen.stdin.write(b"go\n")
        self.popen.stdin.close()


class FloorOneServiceRunner(FloorRunner):
    name = "floor-one-service"
    one_service = True


class FloorAdoptRunner(FloorRunner):
    """The floor's pods made as orphans, then tfkube's role Jobs adopting them: an
    operator that makes its pods at the floor's pace and leaves them to Kubernetes' Job
    controller after (re-making a failed one, counting completions)."""

    name = "floor-adopt"
    adopt = True


class FloorJobsRunner(FloorRunner):
    """The floor creating tfkube's role Jobs as rendered, so Kubernetes' Job controller
    makes and follows the pods: the least an operator built on Jobs pays."""

    name = "floor-jobs"
    jobs = True


FLOORS: dict[str, type[FloorRunner]] = {
    r.name: r for r in (FloorRunner, FloorOneServiceRunner, FloorJobsRunner, FloorAdoptRunner)
}
RUNNERS = (*FLOORS, "tfkube", "kubeflow", "kubeflow-running", "kubeflow-tuned")


def make_runner(name: str, ctx: Context, namespace: str, size: Size) -> Runner:
    if name == "tfkube":
        return TfkubeRunner(ctx, namespace, size)
    if name in FLOORS:
        return FLOORS[name](ctx, namespace, size)
    return KubeflowRunner(ctx, namespace, size, name)


def wait_until(
    what: str, check: Any, popen: subprocess.Popen[bytes], timeout: float = 120.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {popen.returncode}")
        with contextlib.suppress(OSError, ValueError):
            if check():
                return
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


# --------------------------------------------------------------------------- following a run


@dataclass
class Tracker:
    """What the watches saw, with times from submit."""

    size: Size
    t0: float
    runner: Runner
    phases: dict[str, str] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    workers_ok: set[str] = field(default_factory=set)
    ps_seen: set[str] = field(default_factory=set)
    ps_live: set[str] = field(default_factory=set)
    bound: set[str] = field(default_factory=set)
    first_created: float | None = None
    """When the first replica's pod was seen: what the runner took to start creating."""
    all_created: float | None = None
    """When every replica's pod had been seen: the ramp's first part (creating)..."""
    all_bound: float | None = None
    """...its second (the scheduler binding them)..."""
    all_running: float | None = None
    """...and its end (the fake kubelet starting them)."""
    workers_done: float | None = None
    outcome: str | None = None
    succeeded: float | None = None
    ps_gone: float | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        name, role = meta["name"], (meta.get("labels") or {}).get(ROLE_LABEL)
        phase = status.get("phase") or "Pending"
        if kind == "DELETED":
            self.phases.pop(name, None)
            self.ps_live.discard(name)
            if role == "ps" and not self.ps_live and len(self.ps_seen) >= self.size.ps:
                self.ps_gone = self.ps_gone if self.ps_gone is not None else self.now()
            self.changed.set()
            return
        self.phases[name] = phase + ("/terminating" if meta.get("deletionTimestamp") else "")
        if self.first_created is None:
            self.first_created = self.now()
        if self.all_created is None and len(self.phases) >= self.size.total:
            self.all_created = self.now()
        if (pod.get("spec") or {}).get("nodeName") and name not in self.bound:
            self.bound.add(name)
            if len(self.bound) >= self.size.total and self.all_bound is None:
                self.all_bound = self.now()
        if role == "ps":
            self.ps_seen.add(name)
            self.ps_live.add(name)
        if phase in ("Running", "Succeeded") and name not in self.started:
            self.started.add(name)
            if len(self.started) >= self.size.total and self.all_running is None:
                self.all_running = self.now()
        if role == "worker" and phase == "Succeeded":
            self.workers_ok.add(name)
            if len(self.workers_ok) >= self.size.workers and self.workers_done is None:
                self.workers_done = self.now()
                if isinstance(self.runner, FloorRunner):
                    self._decided("Succeeded")
        self.changed.set()

    def on_job(self, kind: str, obj: dict[str, Any]) -> None:
        verdict = self.runner.outcome(obj)
        if verdict is not None:
            self._decided(verdict)

    def _decided(self, verdict: str) -> None:
        if self.outcome is None:
            self.outcome, self.succeeded = verdict, self.now()
            self.changed.set()

    def line(self) -> str:
        counts = Counter(self.phases.values())
        phases = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        return (
            f"{self.now():7.1f}s pods {len(self.phases)} ({phases}); started {len(self.started)}/"
            f"{self.size.total}, workers done {len(self.workers_ok)}/{self.size.workers}, "
            f"job {self.outcome or '-'}"
        )


async def follow_run(ctx: Context, runner: Runner, tracker: Tracker) -> None:
    """Submit, then watch until the PS are gone (or were left: `--linger` after success)."""
    args = ctx.args
    stop = asyncio.Event()
    label = f"[{runner.name} {runner.size}]"
    async with Api(ctx.identities["bench"], connections=4) as api:
        watches = [
            asyncio.create_task(
                api.follow(f"/api/v1/namespaces/{runner.namespace}/pods", tracker.on_pod, stop)
            )
        ]
        if runner.job_path is not None:
            watches.append(asyncio.create_task(api.follow(runner.job_path, tracker.on_job, stop)))
        await asyncio.sleep(0.5)  # the watches are open before the clock starts
        tracker.t0 = time.monotonic()
        await runner.submit()
        last = -math.inf
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tracker.changed.wait(), 1.0)
            tracker.changed.clear()
            now = tracker.now()
            if now - last >= args.progress:
                log(f"{label} {tracker.line()}")
                last = now
            if any(w.done() for w in watches):
                for w in watches:
                    if w.done() and w.exception() is not None:
                        raise w.exception()  # type: ignore[misc]
            if tracker.ps_gone is not None and tracker.outcome is not None:
                break
            if tracker.succeeded is not None and now - tracker.succeeded > args.linger:
                break  # the PS were left running (cleanPodPolicy None) or never went
            if now > args.timeout:
                log(f"{label} timed out after {args.timeout:.0f}s")
                break
        log(f"{label} {tracker.line()}")
        stop.set()
        for w in watches:
            w.cancel()
            with contextlib.suppress(asyncio.CancelledError, ApiError):
                await w


def run_one(ctx: Context, name: str, size: Size) -> tuple[dict[str, Any], Any]:
    """One runner on one size: its figures, and what deletes its namespace (the next run
    must start clean; the last one need not wait)."""
    namespace = f"{name}-{size}".replace("x", "x")
    ctx.admin("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    runner = make_runner(name, ctx, namespace, size)
    volumes = bind_volumes(ctx, namespace) if runner.volumes else []
    popen = runner.start()
    profiler = profile(ctx, runner, popen)
    plane = ctx.control_plane()
    go_profiles = (
        control_plane_profiles(ctx.args.profile, namespace, ctx.cluster.state.token, plane)
        if ctx.args.profile is not None
        else contextlib.nullcontext()
    )
    tracker = Tracker(size, time.monotonic(), runner)
    cpu0 = cpu_seconds(popen.pid)
    plane0 = {n: cpu_seconds(p) for n, p in plane.items()}
    wall0 = time.time()
    try:
        with go_profiles:
            asyncio.run(follow_run(ctx, runner, tracker))
    finally:
        end = time.time()
        alive = popen.poll() is None
        cpu = cpu_seconds(popen.pid) - cpu0 if alive else math.nan
        rss = peak_rss_mib(popen.pid) if alive else math.nan
        plane_cpu = {n: round(cpu_seconds(p) - plane0[n], 1) for n, p in plane.items()}
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its profile and exits
            profiler.wait(60)
        stop(popen)
    time.sleep(1.0)  # the audit log's last lines
    requests = ctx.audit.window(wall0 - 0.5, end, namespace)
    row = report_row(name, size, tracker, runner, requests, cpu, rss, plane_cpu)
    return row, lambda: cleanup(ctx, namespace, volumes)


def profile(ctx: Context, runner: Runner, popen: subprocess.Popen[bytes]) -> Any:
    """With --profile DIR: py-spy samples tfkube's operator (collapsed stacks, 50 Hz); the
    control plane's Go components are profiled beside every runner (_pprof.py)."""
    if ctx.args.profile is None or not isinstance(runner, TfkubeRunner):
        return None
    ctx.args.profile.mkdir(parents=True, exist_ok=True)
    out = ctx.args.profile / f"{runner.namespace}.txt"
    spy = Path(sys.executable).with_name("py-spy")
    argv = [str(spy), "record", "--pid", str(popen.pid), "--rate", "50", "--threads"]
    argv += ["--format", "raw", "--output", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def report_row(
    name: str,
    size: Size,
    t: Tracker,
    runner: Runner,
    requests: Requests,
    cpu: float,
    rss: float,
    plane_cpu: dict[str, float],
) -> dict[str, Any]:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 2)

    who = runner.operator
    return {
        "runner": name,
        "ps": size.ps,
        "workers": size.workers,
        "replicas": size.total,
        "outcome": t.outcome,
        "first_created_s": r(t.first_created),
        "all_created_s": r(t.all_created),
        "all_bound_s": r(t.all_bound),
        "all_running_s": r(t.all_running),
        "workers_done_s": r(t.workers_done),
        "succeeded_s": r(t.succeeded),
        "ps_gone_s": r(t.ps_gone),
        "ps_gone_after_success_s": r(after(t.ps_gone, t.succeeded)),
        "ps_gone_after_workers_s": r(after(t.ps_gone, t.workers_done)),
        "ps_kept": getattr(runner, "clean", "Running") == "None",
        "ps_waited_s": t.runner.ctx.args.linger,
        "operator_cpu_s": r(cpu),
        "operator_peak_rss_mib": r(rss),
        "operator_requests": requests.of(who),
        "operator_requests_by_verb": requests.verbs(who),
        "operator_created": requests.creates(who),
        "operator_events": sum(requests.creates(who, events=True).values()),
        "created_in_namespace": requests.creates(),
        "requests_total": requests.total(),
        "requests_by_component": dict(requests.by_component.most_common()),
        "requests_top": requests.top_calls(),
        "pod_status_patches": requests.status_plays.summary(),
        "control_plane_cpu_s": plane_cpu,
    }


def after(end: float | None, start: float | None) -> float | None:
    return None if end is None or start is None else end - start


def cleanup(ctx: Context, namespace: str, volumes: list[str]) -> None:
    """Delete the run's namespace and wait until it is gone: the next run starts clean."""
    t = time.monotonic()
    ctx.admin("DELETE", f"/api/v1/namespaces/{namespace}")
    while True:
        try:
            ctx.admin("GET", f"/api/v1/namespaces/{namespace}")
        except OSError as exc:
            if "HTTP 404" in str(exc):
                break
            raise
        time.sleep(0.5)
    for name in volumes:
        ctx.admin("DELETE", f"/api/v1/persistentvolumes/{name}")
    log(f"namespace {namespace} deleted in {time.monotonic() - t:.1f}s")
    settle(ctx)


QUIET_CORES = 0.15
"""The control plane counts as idle below this much CPU (in cores, all its processes)."""
SETTLE_SECONDS = 300.0


def settle(ctx: Context, window: float = 2.0) -> None:
    """Until the control plane is idle: with its namespace gone a run's pods are deleted,
    but the fake kubelet (KWOK) may still be working through their events for a minute or
    more (patching and deleting pods that are gone: 5,000-6,000 answers 404 during the
    next run's ramp in runs Q9, docs/benchmarks.md). A run started meanwhile shares the
    control plane with that backlog, and how its own pods' status patches then fall
    (once per pod, or about 1.5 times) moved its figures by more than the 10 % being
    measured. So every run starts on an idle control plane, as the first run does."""
    t = time.monotonic()
    pids = ctx.control_plane()
    while time.monotonic() - t < SETTLE_SECONDS:
        before = sum(cpu_seconds(pid) for pid in pids.values())
        time.sleep(window)
        busy = (sum(cpu_seconds(pid) for pid in pids.values()) - before) / window
        if busy < QUIET_CORES:
            log(f"control plane idle after {time.monotonic() - t:.1f}s ({busy:.2f} cores)")
            return
    log(f"control plane still busy after {SETTLE_SECONDS:.0f}s ({busy:.2f} cores); going on")


# --------------------------------------------------------------------------- report


def ratio(value: float | int | None, floor: float | int | None) -> str:
    if value is None or floor is None or floor == 0:
        return "-"
    return f"{value / floor:.2f}"


def fmt(value: float | None, digits: int = 1) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:.{digits}f}"
    )


def not_gone(row: dict[str, Any]) -> str:
    """Kept by policy (Kubeflow's default cleanPodPolicy None), or not gone in time."""
    return "kept" if row.get("ps_kept") else f"> {row.get('ps_waited_s', 0):.0f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    out = [
        "| job | runner | all running s (x floor) | succeeded s (x floor) |"
        " PS gone after success s | PS gone after last worker s | operator creates (events) |"
        " operator requests (x floor) | all requests (x floor) | operator CPU s |"
        " operator peak RSS MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    floors = {(r["ps"], r["workers"]): r for r in rows if r["runner"] == "floor"}
    for row in rows:
        floor = floors.get((row["ps"], row["workers"]), {})

        def vs(key: str, row: dict[str, Any] = row, floor: dict[str, Any] = floor) -> str:
            return ratio(row[key], floor.get(key))

        creates = sum(row["operator_created"].values())
        gone, gone_workers = row["ps_gone_after_success_s"], row["ps_gone_after_workers_s"]
        out.append(
            f"| {row['ps']} PS + {row['workers']} workers | {row['runner']} |"
            f" {fmt(row['all_running_s'])} ({vs('all_running_s')}) |"
            f" {fmt(row['succeeded_s'])} ({vs('succeeded_s')}) |"
            f" {fmt(max(gone, 0.0)) if gone is not None else not_gone(row)} |"
            f" {fmt(gone_workers) if gone_workers is not None else not_gone(row)} |"
            f" {creates} ({row['operator_events']}) |"
            f" {row['operator_requests']} ({vs('operator_requests')}) |"
            f" {row['requests_total']} ({vs('requests_total')}) |"
            f" {fmt(row['operator_cpu_s'])} | {fmt(row['operator_peak_rss_mib'], 0)} |"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------- main


def isolate() -> int:
    """Re-run this benchmark inside a private network and mount namespace (see above)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        sys.exit("vs_kubeflow needs `unshare` (util-linux) and `ip` (iproute2), and root")
    mount = f"mkdir -p {WEBHOOK_CERTS} && mount -t tmpfs -o size=8m tfkube-bench {WEBHOOK_CERTS}"
    script = f'ip link set lo up && {mount} && exec "$@"'
    argv = [
        "unshare",
        "--net",
        "--mount",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        sys.executable,
        *sys.argv,
    ]
    child = subprocess.Popen(argv, env={**os.environ, ISOLATED: "1"})

    def forward(signum: int, _frame: Any) -> None:  # to the run, which cleans up after itself
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    # The empty mount point stays in the real /tmp: removing it would detach the tmpfs of any
    # other run still using it in its own mount namespace (Linux does that since 3.18).
    return child.wait()


def terminated(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1x2,10x100,100x1000", help="PSxWORKERS,...")
    parser.add_argument("--runners", default=",".join(RUNNERS), help=f"some of {','.join(RUNNERS)}")
    parser.add_argument("--duration", default="30s", help="each worker's fake run time")
    parser.add_argument(
        "--nodes", type=int, default=0, help="fake nodes (default: 1 per 1,000 pods, +1)"
    )
    parser.add_argument(
        "--kwok-parallelism",
        type=int,
        help="pods the fake kubelet (KWOK) moves through its stages at once (default: one per "
        "fake node, as real kubelets would; KWOK's own default, 4, was the benchmark's until "
        "runs Q11: at 11,000 replicas it made the fake kubelet the pace and its repeats the noise)",
    )
    parser.add_argument(
        "--max-pods-per-job",
        type=int,
        default=DEFAULT_MAX_PODS_PER_JOB,
        help="tfkube's role Jobs: at most this many pods each, for the operator and for the "
        "floors' layout alike (their Services and pods as tfkube would render them)",
    )
    parser.add_argument(
        "--floor-parallel", type=int, default=250, help="the floor's requests in flight"
    )
    parser.add_argument(
        "--linger", type=float, default=15.0, help="s to wait for the PS after success"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="s per run")
    parser.add_argument("--progress", type=float, default=5.0, help="s between progress lines")
    parser.add_argument("--json", action="store_true", help="one JSON object per runner and size")
    parser.add_argument(
        "--keep", type=Path, help="copy the work dir (logs, audit log) here (a dir per run)"
    )
    parser.add_argument(
        "--shared-plane",
        action="store_true",
        help="run every runner and size on one control plane, deleting each run's namespace "
        "after it (the default: each run on a control plane of its own, so that no run "
        "starts where another left the control plane; runs Q11)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="py-spy the operator, pprof the control plane (_pprof.py), into this dir",
    )
    parser.add_argument(
        "--cpus",
        type=float,
        help="run everything within this many cores (a cgroup-v1 CPU quota; root)",
    )
    parser.add_argument(
        "--runner-unquoted",
        action="store_true",
        help="with --cpus: each runner's own process (operator, floor client) outside the quota",
    )
    args = parser.parse_args()
    args.sizes = [Size.parse(s) for s in args.sizes.split(",")]
    args.runners = [r.strip() for r in args.runners.split(",")]
    unknown = set(args.runners) - set(RUNNERS)
    if unknown:
        parser.error(f"unknown runners {sorted(unknown)}; choose from {', '.join(RUNNERS)}")
    if os.environ.get(ISOLATED) != "1":
        if args.cpus is None:
            return isolate()
        with _cpu.quota(args.cpus, args.runner_unquoted):
            return isolate()
    # SIGTERM (forwarded by isolate) unwinds like Ctrl-C: each `finally` stops the runner's
    # process by its PID and the control plane; Python's default would exit without them.
    signal.signal(signal.SIGTERM, terminated)
    rows: list[dict[str, Any]] = []
    runs = [(size, name) for size in args.sizes for name in args.runners]
    with tempfile.TemporaryDirectory(prefix="tfkube-vs-kubeflow-") as tmp:
        if args.shared_plane:
            ctx = setup(args, Path(tmp))
            try:
                for i, (size, name) in enumerate(runs):
                    row, clean = run_logged(ctx, name, size)
                    rows.append(row)
                    if i + 1 < len(runs):
                        clean()
            finally:
                ctx.cluster.stop(remove_workdir=True)
                keep(args, Path(tmp))
        else:
            for i, (size, name) in enumerate(runs):
                work = Path(tmp) / f"{i:02d}-{name}-{size}"  # a runner may come twice
                work.mkdir()
                ctx = setup(args, work)
                try:
                    rows.append(run_logged(ctx, name, size)[0])
                finally:
                    ctx.cluster.stop(remove_workdir=True)
                    keep(args, work)
    if not args.json:
        print(markdown(rows))
    return 0


def run_logged(ctx: Context, name: str, size: Size) -> tuple[dict[str, Any], Any]:
    log(f"== {name}, {size.ps} PS + {size.workers} workers")
    row, clean = run_one(ctx, name, size)
    if ctx.args.json:
        print(json.dumps(row), flush=True)
    return row, clean


def keep(args: argparse.Namespace, work: Path) -> None:
    if args.keep is not None:
        target = args.keep if args.shared_plane else args.keep / work.name
        shutil.copytree(work, target, dirs_exist_ok=True)


if __name__ == "__main__":
    sys.exit(main())
