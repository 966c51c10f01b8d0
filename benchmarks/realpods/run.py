"""Benchmark: the user's question on real pods, tfkube beside Kubeflow's training operator.

How soon does my job start training, and how soon is it training again after a failure? The
same between-graph job (examples/mnist-between-graph: 1 PS + 2 workers, real TensorFlow)
through tfkube's operator and through Kubeflow's training operator v1.9.4, one job at a
time, alternating (tfkube first in even rounds, Kubeflow first in odd ones), on the test
cluster's real kubelet node (containerd, runc, CNI, CoreDNS: tools/kube/realnode.py):

    flock /tmp/tfkube-realnode.lock nice .venv/bin/python benchmarks/realpods/run.py \\
        [--jobs 10] [--json FILE]

Needs the control plane and the real node's parts (`make kube-bins kube-node`) and
Kubeflow's operator (`tools/kubeflow/build.sh`). The images are imported into the node
before the first job (no pulls: the SLO excludes them).

Every job: 1 PS + 2 workers, `--train_steps=1000 --step_sleep=0.02 --checkpoint_steps=100`,
restartPolicy OnFailure, checkpoints on a claim pre-bound to a host folder of the node
(tfkube: the job's logs claim; Kubeflow: the same claim mounted where the program writes
its checkpoints), Pod Security `restricted` in both namespaces, the same image, the same
user (65532), the same memory requests. Kubeflow's job has `cleanPodPolicy: Running`
(at its default, None, the PS is never deleted) and `successPolicy: AllWorkers`; its pods
run the example's own `run.sh`, the classic flags made from the TF_CONFIG Kubeflow sets
(the code from a ConfigMap; tfkube's launcher fetches and verifies its own copy).

Measured, per job, by watches on the pods and the job object (the client's clock) and by
the container runtime's log stamps (the same machine's clock):

  all running      submit -> every replica's pod seen Running
  first step       submit -> the first worker's `session ready at global_step=` (the line
                   right before its first step)
  PS deleted       once a checkpoint exists, the PS pod is deleted (one DELETE) ->
  training again   the first worker line stamped after the old PS pod is gone that shows
                   training (`session ready at global_step=` of a restarted worker, or
                   `tfkube-steps:`, which a worker prints at its first step after a pause);
                   how each operator got there is reported (restarted pods, restarts)
  PS gone          the job's success (its object) -> no PS pod left
and the job's accuracy from its result.json. p50 and p99 over the jobs, against Kubernetes'
pod start-up SLO (p99 <= 5 s from pod creation to running, image pulls excluded; here
from submit, so the operator's own time is in it).

Everything runs inside a private network and mount namespace with only a loopback interface
(`unshare --net --mount`, as benchmarks/vs_kubeflow does): Kubeflow's webhook server binds
every interface. The real node's bridge, containerd's mounts and kube-proxy's rules are that
namespace's own, and go with it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_kubeflow"))

import run as vs  # noqa: E402  (benchmarks/vs_kubeflow/run.py: isolation, Kubeflow's start)

from tfkube.engines.kubernetes import KubernetesBackend  # noqa: E402
from tfkube.kube.names import pod_security_labels  # noqa: E402
from tfkube.kube.observe import parse_time  # noqa: E402
from tfkube.spec import DEFAULT_IMAGE, parse_job  # noqa: E402

EXAMPLE = ROOT / "examples" / "mnist-between-graph"
WORKER_ARGS = ["--train_steps=1000", "--step_sleep=0.02", "--checkpoint_steps=100"]
SELECTOR = {"tfkube.io/real-node": "true"}
TOLERATIONS = [{"key": "tfkube.io/real-node", "operator": "Exists", "effect": "NoSchedule"}]
MEMORY = "2Gi"
SLO_SECONDS = 5.0
TRAINING = re.compile(r"session ready at global_step=|tfkube-steps: ")
READY = re.compile(r"session ready at global_step=")
KUBEFLOW_ENTRY = (
    # The classic flags from Kubeflow's TF_CONFIG, then the example's own run.sh.
    "import json, os, sys\n"
    "c = json.loads(os.environ['TF_CONFIG'])\n"
    "t = c['task']\n"
    "flags = ['--ps_hosts=' + ','.join(c['cluster']['ps']),\n"
    "         '--worker_hosts=' + ','.join(c['cluster']['worker']),\n"
    "         '--job_name=' + t['type'], '--task_index=' + str(t['index'])]\n"
    "os.execvp('bash', ['bash', '/code/run.sh', *flags, *sys.argv[1:]])\n"
)
RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def log(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the two jobs


def tfkube_job(name: str) -> dict[str, Any]:
    raw = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    raw["metadata"]["name"] = name
    spec = raw["spec"]
    spec["code"]["source"] = str(EXAMPLE)
    spec["storage"] = {"logs": {"size": "1Gi"}}
    for role in spec["replicas"].values():
        role["nodeSelector"] = dict(SELECTOR)
        role["tolerations"] = list(TOLERATIONS)
        role["resources"] = {"memory": MEMORY}
    spec["replicas"]["worker"]["args"] = list(WORKER_ARGS)
    return dict(raw)


def kubeflow_job(name: str, claim: str) -> dict[str, Any]:
    def replica(count: int, args: list[str]) -> dict[str, Any]:
        container = {
            "name": "tensorflow",
            "image": DEFAULT_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-c", KUBEFLOW_ENTRY],
            "args": args,
            "ports": [{"name": "tfjob-port", "containerPort": 2222}],
            "env": [
                {"name": "TFKUBE_LOG_DIR", "value": "/logs"},
                {"name": "TFKUBE_DATA_DIR", "value": "/data"},
                {"name": "HOME", "value": "/tmp"},
            ],
            "resources": {"requests": {"memory": MEMORY}, "limits": {"memory": MEMORY}},
            "securityContext": dict(RESTRICTED),
            "volumeMounts": [
                {"name": "code", "mountPath": "/code", "readOnly": True},
                {"name": "logs", "mountPath": "/logs"},
                {"name": "data", "mountPath": "/data"},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        }
        return {
            "replicas": count,
            "restartPolicy": "ExitCode",
            "template": {
                "spec": {
                    "containers": [container],
                    "nodeSelector": dict(SELECTOR),
                    "tolerations": list(TOLERATIONS),
                    "automountServiceAccountToken": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "volumes": [
                        {"name": "code", "configMap": {"name": f"{name}-code"}},
                        {"name": "logs", "persistentVolumeClaim": {"claimName": claim}},
                        {"name": "data", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                }
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 6},
            "successPolicy": "AllWorkers",
            "tfReplicaSpecs": {"PS": replica(1, []), "Worker": replica(2, list(WORKER_ARGS))},
        },
    }


# --------------------------------------------------------------------------- watches


@dataclass
class PodSeen:
    name: str
    uid: str
    role: str
    index: str
    created: float
    running: float | None = None
    gone: float | None = None
    restarts: int = 0


@dataclass
class Follow:
    """What the watches saw of one job (epoch seconds, the client's clock)."""

    pods: dict[str, PodSeen] = field(default_factory=dict)  # by uid
    outcome: str | None = None
    outcome_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class Runner:
    """One operator: its namespace, how it names its pods' roles, how it takes a job."""

    name = ""
    group, plural = "", ""
    role_label = index_label = job_label = ""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.namespace = f"bench-{self.name}"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        raise NotImplementedError

    def submit(self, name: str) -> None:
        raise NotImplementedError

    def outcome(self, obj: dict[str, Any]) -> str | None:
        raise NotImplementedError

    def claim(self, name: str) -> str:
        return f"{name}-logs"

    def role(self, pod: client.V1Pod) -> tuple[str, str, str]:
        labels = pod.metadata.labels or {}
        return (
            labels.get(self.job_label, ""),
            labels.get(self.role_label, "").lower(),
            labels.get(self.index_label, ""),
        )


class TfkubeRunner(Runner):
    name = "tfkube"
    group, plural = "tfkube.io/v1alpha1", "tfjobs"
    role_label, index_label, job_label = (
        "tfkube.io/replica-type",
        "batch.kubernetes.io/job-completion-index",
        "tfkube.io/job-name",
    )

    def start(self) -> None:
        out = (self.bench.work / "tfkube-operator.log").open("ab")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "tfkube", "operator", "--kubeconfig",
             str(self.bench.kubeconfig), "--namespace", self.namespace],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
        )  # fmt: skip
        text = lambda: (self.bench.work / "tfkube-operator.log").read_text(errors="replace")  # noqa: E731
        vs.wait_until("tfkube operator ready", lambda: "watching" in text(), self.popen)

    def submit(self, name: str) -> None:
        backend = KubernetesBackend(api_client=self.bench.api, namespace=self.namespace)
        backend.submit(parse_job(tfkube_job(name)), EXAMPLE)

    def outcome(self, obj: dict[str, Any]) -> str | None:
        phase = (obj.get("status") or {}).get("phase")
        return str(phase) if phase in ("Succeeded", "Failed") else None


class KubeflowRunner(Runner):
    name = "kubeflow"
    group, plural = "kubeflow.org/v1", "tfjobs"
    role_label, index_label, job_label = (
        "training.kubeflow.org/replica-type",
        "training.kubeflow.org/replica-index",
        "training.kubeflow.org/job-name",
    )

    def start(self) -> None:
        kube = vs.cluster_module()
        health, metrics, webhook = kube.free_port(), kube.free_port(), kube.free_port()
        out = (self.bench.work / "kubeflow-operator.log").open("ab")
        self.popen = subprocess.Popen(
            [str(self.bench.kubeflow_bin), f"--kubeconfig={self.bench.kubeconfig}",
             "--enable-scheme=tfjob", f"--namespace={self.namespace}", "--leader-elect=false",
             f"--health-probe-bind-address=127.0.0.1:{health}",
             f"--metrics-bind-address=127.0.0.1:{metrics}", f"--webhook-server-port={webhook}"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "MY_POD_NAMESPACE": "kubeflow"},
        )  # fmt: skip
        vs.wait_until("Kubeflow's webhook certificate", self._copy_certificate, self.popen)
        vs.wait_until(
            "Kubeflow operator /readyz",
            lambda: vs._http_ok(f"http://127.0.0.1:{health}/readyz"),
            self.popen,
        )

    def _copy_certificate(self) -> bool:
        secret = self.bench.core.read_namespaced_secret(
            "training-operator-webhook-cert", "kubeflow"
        )
        data = secret.data or {}
        if not data.get("tls.crt") or not data.get("tls.key"):
            return False
        certs = vs.WEBHOOK_CERTS / "serving-certs"
        certs.mkdir(parents=True, exist_ok=True)
        for key in ("tls.crt", "tls.key"):
            (certs / key).write_bytes(base64.b64decode(data[key]))
        return True

    def submit(self, name: str) -> None:
        claim = self.claim(name)
        self.bench.core.create_namespaced_persistent_volume_claim(
            self.namespace,
            {
                "metadata": {"name": claim},
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )
        files = {p.name: p.read_text() for p in EXAMPLE.iterdir() if p.is_file()}
        self.bench.core.create_namespaced_config_map(
            self.namespace, {"metadata": {"name": f"{name}-code"}, "data": files}
        )
        self.bench.custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", self.namespace, "tfjobs", kubeflow_job(name, claim)
        )

    def outcome(self, obj: dict[str, Any]) -> str | None:
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") in ("Succeeded", "Failed") and cond.get("status") == "True":
                return str(cond["type"])
        return None

    def cleanup(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            self.bench.core.delete_namespaced_config_map(f"{name}-code", self.namespace)
        with contextlib.suppress(ApiException):
            self.bench.core.delete_namespaced_persistent_volume_claim(
                self.claim(name), self.namespace
            )


class Watcher(threading.Thread):
    """Pods and job objects of one namespace, into the current job's Follow."""

    def __init__(self, bench: Bench, runner: Runner) -> None:
        super().__init__(daemon=True)
        self.bench, self.runner = bench, runner
        self.follow: Follow = Follow()
        self.job = ""
        self.stopping = threading.Event()

    def run(self) -> None:
        pods = threading.Thread(target=self._pods, daemon=True)
        pods.start()
        self._jobs()

    def _loop(self, fn: Any, on: Any, **kw: Any) -> None:
        while not self.stopping.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(fn, timeout_seconds=60, **kw):
                    on(ev["type"], ev["object"])
                    if self.stopping.is_set():
                        break
            except Exception as exc:  # a dropped watch: open it again
                log(f"watch {self.runner.name}: {exc!r}; again")
                time.sleep(0.5)

    def _pods(self) -> None:
        self._loop(
            self.bench.core.list_namespaced_pod, self._on_pod, namespace=self.runner.namespace
        )

    def _jobs(self) -> None:
        group, version = self.runner.group.split("/")
        self._loop(self.bench.custom.list_namespaced_custom_object, self._on_job,
                   group=group, version=version, namespace=self.runner.namespace,
                   plural=self.runner.plural)  # fmt: skip

    def _on_pod(self, kind: str, pod: client.V1Pod) -> None:
        now = time.time()
        job, role, index = self.runner.role(pod)
        if job != self.job:
            return
        f = self.follow
        with f.lock:
            seen = f.pods.get(pod.metadata.uid)
            if seen is None:
                seen = f.pods[pod.metadata.uid] = PodSeen(
                    pod.metadata.name, pod.metadata.uid, role, index, now
                )
            if kind == "DELETED":
                seen.gone = seen.gone or now
                return
            if pod.status and pod.status.phase == "Running" and seen.running is None:
                seen.running = now
            statuses = (pod.status and pod.status.container_statuses) or []
            seen.restarts = sum(s.restart_count or 0 for s in statuses)

    def _on_job(self, kind: str, obj: dict[str, Any]) -> None:
        if obj.get("metadata", {}).get("name") != self.job or kind == "DELETED":
            return
        verdict = self.runner.outcome(obj)
        f = self.follow
        with f.lock:
            if verdict and f.outcome is None:
                f.outcome, f.outcome_at = verdict, time.time()


# --------------------------------------------------------------------------- one job


class JobFailed(RuntimeError):
    """The job object says Failed."""


@dataclass
class Result:
    runner: str
    job: str
    all_running: float | None = None
    first_step: float | None = None
    ps_deleted_at_step: int | None = None
    training_again: float | None = None
    how_back: str = ""
    failed_after: float | None = None
    mount_retries: int = 0
    """FailedMount events of the job's pods: the kubelet retrying a volume (its first fetch of
    a ConfigMap or claim refused or timed out), which delays the pod by its backoff."""
    outcome: str | None = None
    ps_gone: float | None = None
    accuracy: float | None = None
    global_step: int | None = None
    error: str = ""


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        kube = vs.cluster_module()
        self.cluster = kube.Cluster(
            nodes=[kube.NodeSpec("tfkube-cpu-0", "127.0.1.1")], die_with_parent=True,
            real_node=True, workdir=work / "cluster",
        )  # fmt: skip
        self.realnode = kube._sibling("realnode")
        self.kubeflow_bin = Path(
            subprocess.run([str(vs.KUBEFLOW_BUILD), "--print-bin"], check=True,
                           capture_output=True, text=True).stdout.strip()
        )  # fmt: skip
        subprocess.run([str(vs.KUBEFLOW_BUILD), "--check"], check=True)

    def start(self) -> None:
        t = time.monotonic()
        state = self.cluster.start(timeout=180)
        self.node = self.realnode.NodeState(**state.real_node)
        log(f"control plane and real node ready in {time.monotonic() - t:.0f}s "
            f"(node: {json.dumps(self.node.timings)})")  # fmt: skip
        self.kubeconfig = Path(state.kubeconfig)
        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        ext = client.ApiextensionsV1Api(self.api)
        from tfkube.render import crd

        crd_path = subprocess.run([str(vs.KUBEFLOW_BUILD), "--print-crd"], check=True,
                                  capture_output=True, text=True).stdout.strip()  # fmt: skip
        for obj in (crd(), yaml.safe_load(Path(crd_path).read_text())):
            ext.create_custom_resource_definition(obj)
        for obj_name in ("tfjobs.tfkube.io", "tfjobs.kubeflow.org"):
            vs_wait(f"CRD {obj_name}", lambda n=obj_name: _established(ext, n), 60)
        self.core.create_namespace({"metadata": {"name": "kubeflow"}})
        self.core.create_namespaced_secret(
            "kubeflow", {"metadata": {"name": "training-operator-webhook-cert"}}
        )
        self.runners: list[Runner] = [TfkubeRunner(self), KubeflowRunner(self)]
        self.watchers: dict[str, Watcher] = {}
        for runner in self.runners:
            labels = pod_security_labels("restricted")
            self.core.create_namespace({"metadata": {"name": runner.namespace, "labels": labels}})
            runner.start()
            w = self.watchers[runner.name] = Watcher(self, runner)
            w.start()

    def stop(self) -> None:
        for w in getattr(self, "watchers", {}).values():
            w.stopping.set()
        for runner in getattr(self, "runners", []):
            if runner.popen is not None:
                vs.stop(runner.popen)
        for line in self.cluster.stop(remove_workdir=not self.args.keep):
            if "left" in line or "could not" in line:
                log(f"teardown: {line}")

    # -- one job ----------------------------------------------------------------------

    def run_job(self, runner: Runner, name: str) -> Result:
        res = Result(runner.name, name)
        watcher = self.watchers[runner.name]
        watcher.follow, watcher.job = Follow(), name
        f = watcher.follow
        pvs = self.realnode.bind_claims(self.cluster.api, self.node, runner.namespace,
                                        [runner.claim(name)], "1Gi")  # fmt: skip
        folder = Path(self.node.volumes_dir) / runner.namespace / runner.claim(name)
        deadline = time.time() + self.args.timeout

        def wait(what: str, check: Any, poll: float = 0.1, until: float = deadline) -> Any:
            return self._wait(f"{runner.name} {name}: {what}", until, check, poll, f)

        try:
            t0 = time.time()
            runner.submit(name)
            res.all_running = wait("all running", lambda: _all_running(f, 3)) - t0
            first = wait("first step", lambda: self._first_line(runner, f, READY, 0.0), 0.5)
            res.first_step = first - t0
            step = wait("a checkpoint", lambda: _checkpoint_step(folder) or None, 0.2)
            ps = [p for p in f.pods.values() if p.role == "ps" and p.gone is None]
            before = {p.uid for p in f.pods.values()}
            deleted, killed = time.time(), []
            if self.args.fault == "delete":
                self.core.delete_namespaced_pod(ps[0].name, runner.namespace)
            else:
                killed = self._kill(runner, ps[0].name)
            res.ps_deleted_at_step = step
            try:
                if self.args.fault == "delete":
                    gone = wait("the old PS gone", lambda: f.pods[ps[0].uid].gone)
                else:
                    gone = wait(
                        "the PS's processes gone", lambda: _all_gone(killed) and time.time()
                    )
                back = wait(
                    "training again", lambda: self._first_line(runner, f, TRAINING, gone), 0.5
                )
            except JobFailed:  # what Kubeflow does with a deleted PS: reported, not an error
                assert f.outcome_at is not None
                res.outcome = f.outcome
                res.how_back = (
                    f"never: the job Failed {f.outcome_at - deleted:.1f} s after the delete"
                )
                return res
            res.training_again = back - deleted
            done = wait("its outcome", lambda: f.outcome_at)
            res.outcome = f.outcome
            ps_time = wait("PS gone", lambda: _ps_gone(f), until=min(deadline, done + 60))
            res.ps_gone = max(0.0, ps_time - done)
            new = [p for p in f.pods.values() if p.uid not in before]
            restarts = sum(p.restarts for p in f.pods.values())
            res.how_back = f"{len(new)} new pods, {restarts} container restarts"
            result = json.loads((folder / "result.json").read_text())
            res.accuracy, res.global_step = result["test_accuracy"], result["global_step"]
        except Exception as exc:  # report it, go on with the next job
            res.error = f"{type(exc).__name__}: {exc}"
            log(f"{runner.name} {name}: {res.error}")
        finally:
            res.mount_retries = self._mount_retries(runner, f)
            (self.work / f"{name}-{runner.name}.txt").write_text(self._describe(runner, f))
            self._delete(runner, name, f)
            for pv in pvs:
                with contextlib.suppress(ApiException):
                    self.core.delete_persistent_volume(pv)
        return res

    def _mount_retries(self, runner: Runner, f: Follow) -> int:
        names = {p.name for p in f.pods.values()}
        events = self.core.list_namespaced_event(runner.namespace).items
        return sum(
            e.count or 1
            for e in events
            if e.reason == "FailedMount" and e.involved_object.name in names
        )

    def _kill(self, runner: Runner, pod_name: str) -> list[int]:
        """SIGKILL every process of the pod's `tensorflow` container (found by the container's
        id in their cgroup path): a crash or an OOM kill, the pod object left alone."""
        pod = self.core.read_namespaced_pod(pod_name, runner.namespace)
        (status,) = [s for s in pod.status.container_statuses if s.name == "tensorflow"]
        container = status.container_id.partition("://")[2]
        pids = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    if container in (proc / "cgroup").read_text():
                        pids.append(int(proc.name))
        if not pids:
            raise RuntimeError(f"no process of container {container} found")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def _wait(
        self, what: str, deadline: float, check: Any, poll: float = 0.1, f: Follow | None = None
    ) -> Any:
        """`check()` until it is truthy; a TimeoutError at `deadline`, a RuntimeError as soon
        as the job (`f`) has failed."""
        while time.time() < deadline:
            got = check()
            if got:
                return got
            if f is not None and f.outcome == "Failed":
                raise JobFailed(f"the job failed while waiting for {what}")
            time.sleep(poll)
        raise TimeoutError(what)

    def _first_line(
        self, runner: Runner, f: Follow, pattern: re.Pattern[str], after: float
    ) -> float | None:
        """The earliest stamp of a worker log line matching `pattern` stamped after `after`."""
        stamps = []
        with f.lock:
            workers = [p for p in f.pods.values() if p.role == "worker" and p.gone is None]
        for pod in workers:
            try:
                text = self.core.read_namespaced_pod_log(
                    pod.name, runner.namespace, container="tensorflow", timestamps=True
                )
            except ApiException:
                continue
            for line in text.splitlines():
                stamp, _, rest = line.partition(" ")
                if pattern.search(rest):
                    at = parse_time(stamp)
                    if at > after:
                        stamps.append(at)
                        break
        return min(stamps) if stamps else None

    def _describe(self, runner: Runner, f: Follow) -> str:
        lines = [json.dumps({k: asdict(v) for k, v in f.pods.items()}, indent=1)]
        for pod in self.core.list_namespaced_pod(runner.namespace).items:
            lines.append(f"== {pod.metadata.name} {pod.status.phase}")
            with contextlib.suppress(ApiException):
                text = self.core.read_namespaced_pod_log(
                    pod.metadata.name, runner.namespace, container="tensorflow", timestamps=True
                )
                lines.append(text)
        return "\n".join(lines)

    def _delete(self, runner: Runner, name: str, f: Follow) -> None:
        group, version = runner.group.split("/")
        with contextlib.suppress(ApiException):
            self.custom.delete_namespaced_custom_object(
                group, version, runner.namespace, runner.plural, name,
                propagation_policy="Foreground",
            )  # fmt: skip
        if isinstance(runner, KubeflowRunner):
            runner.cleanup(name)
        with contextlib.suppress(ApiException):
            self.core.delete_namespaced_persistent_volume_claim(
                runner.claim(name), runner.namespace
            )
        end = time.time() + 120
        while time.time() < end:
            if not self.core.list_namespaced_pod(runner.namespace).items:
                return
            time.sleep(0.5)
        log(f"{runner.name} {name}: pods left after 120 s")


def vs_wait(what: str, check: Any, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        with contextlib.suppress(ApiException):
            if check():
                return
        time.sleep(0.2)
    raise TimeoutError(what)


def _established(ext: client.ApiextensionsV1Api, name: str) -> bool:
    got = ext.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in got.status.conditions or [])


def _all_running(f: Follow, total: int) -> float | None:
    with f.lock:
        first: dict[tuple[str, str], float] = {}
        for p in f.pods.values():
            if p.running is not None:
                key = (p.role, p.index)
                first[key] = min(first.get(key, math.inf), p.running)
    return max(first.values()) if len(first) >= total else None


def _ps_gone(f: Follow) -> float | None:
    with f.lock:
        ps = [p for p in f.pods.values() if p.role == "ps"]
        if not ps or any(p.gone is None for p in ps):
            return None
        return max(p.gone for p in ps if p.gone is not None)


def _all_gone(pids: list[int]) -> bool:
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


def _checkpoint_step(folder: Path) -> int:
    steps = [int(m.group(1)) for p in folder.glob("model.ckpt-*.index")
             if (m := re.search(r"model\.ckpt-(\d+)\.index", p.name))]  # fmt: skip
    return max(steps, default=0)


# --------------------------------------------------------------------------- report


def quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile (p99 of 10 values is the largest)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(results: list[Result], fault: str) -> str:
    act = "deleted" if fault == "delete" else "killed"
    rows = ["| runner | jobs ok | all running p50 / p99 s | first step p50 / p99 s | "
            f"PS {act} -> training again p50 / p99 s | success -> PS gone p50 / p99 s | "
            "accuracy min / median | jobs with a volume mount retried | how it came back |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name in ("tfkube", "kubeflow"):
        mine = [r for r in results if r.runner == name]
        ok = [r for r in mine if not r.error]

        def pair(key: str, rs: list[Result] = ok) -> str:
            vals = [getattr(r, key) for r in rs if getattr(r, key) is not None]
            p50, p99 = quantile(vals, 0.5), quantile(vals, 0.99)
            return "-" if p50 is None else f"{p50:.1f} / {p99:.1f}"

        accs = sorted(r.accuracy for r in ok if r.accuracy is not None)
        acc = f"{accs[0]:.4f} / {accs[len(accs) // 2]:.4f}" if accs else "-"
        how = sorted({r.how_back for r in ok})
        if any(r.failed_after is not None for r in ok):
            how.append(f"Failed after the delete p50 / p99 s: {pair('failed_after')}")
        rows.append(f"| {name} | {len(ok)} of {len(mine)} | {pair('all_running', mine)} | "
                    f"{pair('first_step', mine)} | {pair('training_again', mine)} | "
                    f"{pair('ps_gone')} | {acc} | {sum(1 for r in mine if r.mount_retries)} | "
                    f"{'; '.join(how)} |")  # fmt: skip
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10, help="jobs per operator")
    parser.add_argument("--timeout", type=float, default=600.0, help="s per job")
    parser.add_argument(
        "--fault",
        choices=("delete", "kill"),
        default="delete",
        help="what happens to the PS once a checkpoint exists: its pod deleted (one DELETE), "
        "or its container's processes killed (SIGKILL: a crash, an OOM kill)",
    )
    parser.add_argument("--json", type=Path, help="write every job's figures here")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    args = parser.parse_args()
    if os.environ.get(vs.ISOLATED) != "1":
        # The node's images first, out here: building one (tfkube's own layer after a source
        # change) needs the package index, which the private namespace cannot reach.
        subprocess.run(
            [sys.executable, str(ROOT / "tools" / "kube" / "images.py"), "build"], check=True
        )
        return vs.isolate()
    # SIGTERM (and SIGINT, ignored in a background job) end the run through its clean-up.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    work = Path(f"/tmp/tfkube-realpods-{os.getpid()}")
    work.mkdir()
    bench = Bench(args, work)
    results: list[Result] = []
    try:
        bench.start()
        for i in range(args.jobs):
            order = bench.runners if i % 2 == 0 else bench.runners[::-1]
            for runner in order:
                log(f"== round {i + 1}/{args.jobs}: {runner.name}")
                res = bench.run_job(runner, f"mnist-{i + 1}")
                log(f"   {json.dumps(asdict(res))}")
                results.append(res)
                if args.json:
                    args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    finally:
        bench.stop()
        log(f"work dir {work}" + (" kept" if args.keep else ""))
        if not args.keep:
            subprocess.run(["rm", "-rf", str(work)], check=False)
    print(summary(results, args.fault))
    return 0


if __name__ == "__main__":
    sys.exit(main())
