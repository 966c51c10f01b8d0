"""One supervisor process per local job: the thin shell around the planner.

Each tick (0.1 s) it reaps replicas that exited (reading their launcher's termination
message), observes progress when stall detection is on, asks `tfkube.planner.plan` what
to do, does it (start, restart after backoff, stop whole process trees), and writes the
job's state for other shells to read. SIGTERM/SIGINT, or the job folder's `stop` file,
stop the job (phase Failed, reason Stopped). It exits when the job has ended and nothing
of it runs; with a TTL it waits for the TTL and then removes the job's folder.

A confined job (its record names a tenant) starts each launcher in the sandbox
(`_sandbox.py`): as the team's uid, in cgroups holding the role's `resources`, with an
allow-listed environment (the replica's TFKUBE_* contract, PATH, HOME, LANG, the code
token) instead of this process's. A replica the kernel killed at its memory limit ends
Failed with exit code 137 and the message OOMKilled, as on Kubernetes.

A confined job's replicas share a network namespace of their own, holding only loopback
(`_netns`): they reach each other and nothing else. Before the first start, the
supervisor brings in what they would have fetched: the code (downloaded from the server
with the job's token, verified, kept read-only in the job's folder; the replicas never
see the token) and its requirements.txt (installed by a confined launcher in prepare-only
mode, into the team's cache, in the job's namespace with one way out: a proxy to the
package index, `_egress`). Either failing ends the job with the
reason, before any replica starts.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NoReturn

import psutil

from tfkube import contract
from tfkube.engines._data import (
    Cancelled,
    DataSourceError,
    RemoteObject,
    StageResult,
    StoreRef,
    credentials_from_json,
    open_store,
    placements,
    stage,
    writable_tree,
)
from tfkube.engines.local import _egress, _netns
from tfkube.engines.local._cgroups import CgroupLayout, limits_of, this_machine
from tfkube.engines.local._gpus import NotEnoughGpus, assign_gpus, available_gpus
from tfkube.engines.local._procs import alive, free_ports, ref_of, stop_trees
from tfkube.engines.local._sandbox import (
    Confinement,
    SandboxError,
    confinement_for,
    launch,
    passed_environment,
    release,
    sweep,
)
from tfkube.engines.local._store import (
    JobDir,
    JobRecord,
    ReplicaRecord,
    ShareRecord,
    tfkube_cache,
)
from tfkube.engines.local._tenants import TenantIdentity, hand_over
from tfkube.engines.local._usage import Sampler, read_cgroup, read_tree
from tfkube.launcher import FetchError, check_archive, download, file_lock, latest_write
from tfkube.planner import (
    TRAINING_ROLES,
    Decision,
    DeleteJob,
    JobPhase,
    JobStatus,
    ReplicaState,
    Resize,
    Restart,
    Start,
    Stop,
    judge_steps,
    plan,
    scale_problems,
    scaled_job,
    steps_in,
)
from tfkube.safefs import read_file
from tfkube.spec import (
    Resources,
    Role,
    TFJob,
    dump_job,
    load_job_text,
    replica_environment,
)
from tfkube.tfcluster import (
    CLUSTER_ROLES,
    cluster_spec,
    local_address,
    replica_key,
    replica_order,
)

TICK_SECONDS = 0.1
PROGRESS_EVERY = 1.0
"""How often progress is observed (log files and the log folder's mtimes)."""
_INHERITED_DROP = (contract.RESERVED_PREFIX, contract.TF_CONFIG, "VIRTUAL_ENV")
OOM_EXIT_CODE = contract.signal_exit_code(signal.SIGKILL)
MAX_MESSAGE_READ = contract.MAX_MESSAGE_BYTES
FETCH_ATTEMPTS = 5
"""Tries to download a confined job's code from the server (a transient error, e.g. the
server restarting, waits 2 s between tries); then the job fails."""
PREPARE_KEY = "prepare"
"""The termination message's name of the confined prepare step."""
STEPS_EVERY = 1.0
"""How often each training replica's new output is read for `tfkube-steps: N` lines."""
MAX_STEPS_READ = 64 * 1024
"""New output read per replica and look; past it only the newest is read."""


def cgroup_prefix(record: JobRecord) -> str:
    """What the names of a confined job's cgroups start with: `<user>.<job uid>.`."""
    assert record.tenant is not None
    return f"{record.tenant.user}.{record.uid[:12]}."


def oom_message(resources: Resources) -> str:
    """A replica's message after the kernel killed it at its memory limit. Pure."""
    return (
        f"OOMKilled: over its memory limit of {resources.memory} (resources.memory); "
        "the kernel killed it"
    )


def read_bounded(path: Path, limit: int = MAX_MESSAGE_READ) -> str | None:
    """A regular file's first `limit` bytes, never following a link nor waiting on a
    FIFO: a replica may have planted either where its termination message goes
    (`tfkube.safefs.read_file`: a hard-linked file is refused too)."""
    try:
        return read_file(path, limit).decode(errors="replace")
    except OSError:
        return None


def _status_of(record: JobRecord, now: float) -> JobStatus:
    return JobStatus(
        phase=record.phase,
        started_at=record.started_at or now,
        finished_at=record.finished_at,
        restarts=record.restarts,
        reason=record.reason,
        message=record.message,
        replicas=tuple(r.status() for r in record.replicas),
    )


def replica_records(job: TFJob, ports: list[int]) -> list[ReplicaRecord]:
    """The job's replicas as its spec (job.yaml, the one count) says, each member of the
    TensorFlow cluster on one of `ports` (in order), with the GPUs its role asks for."""
    out = []
    free = iter(ports)
    for role, index in job.replica_keys():
        spec = job.spec.replicas.get(role)
        out.append(
            ReplicaRecord(
                role=role.value,
                index=index,
                port=next(free) if role.value in CLUSTER_ROLES else 0,
                gpu_request=spec.resources.gpu if spec else 0,
            )
        )
    return out


class Supervisor:
    def __init__(self, job_dir: JobDir, clock: Callable[[], float] = time.time) -> None:
        self.dir = job_dir
        self.clock = clock
        self.job: TFJob = load_job_text(job_dir.spec.read_text(), str(job_dir.spec))
        self.record = job_dir.read()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stop_reason: str | None = None
        self.observed_at = 0.0
        self.claimed_at = 0.0
        if not self.record.replicas:  # first start: written when it registers (run)
            members = sum(self.job.spec.replicas.count(Role(r)) for r in CLUSTER_ROLES)
            self.record.replicas = replica_records(self.job, free_ports(members))
        self.cluster = self._cluster()
        artifact = self.record.artifact
        self.code_url: str | None = None  # no code: every role runs its own command
        if artifact:
            self.code_url = artifact if "://" in artifact else Path(artifact).as_uri()
        self.code_token = job_dir.read_code_token()
        taken = job_dir.take_data_credentials()  # off the disk at once
        self.data_credentials = credentials_from_json(taken) if taken else None
        self.confined: dict[str, Confinement] = {}
        """Confined replicas that run, by key: their cgroups are released after."""
        self.netns: int | None = None
        """A confined job's network namespace (a descriptor holding it), made by
        `_isolate`; it goes when this process and the replicas in it have ended."""
        self.usage = Sampler(self.record.log_dir)
        self.cgroups: CgroupLayout | None = this_machine() if self.record.tenant else None
        self.steps_at = 0.0
        self.step_offsets: dict[str, int] = {}
        """Where each running training replica's output was read up to (its log file)."""
        self.step_samples: dict[str, list[tuple[float, int]]] = {}
        """(time, its own steps seen by then) of each running training replica's start."""
        # Plain processes inherit this process's environment; confined ones never do.
        self.base_env: dict[str, str] = {}
        if self.record.tenant is None:
            self.base_env = {
                k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_DROP)
            }
            if self.code_token is not None:
                self.base_env[contract.CODE_TOKEN] = self.code_token
            # Replicas run with tfkube's Python: `python3` in run.sh finds it first.
            python_bin = str(Path(sys.executable).parent)
            self.base_env["PATH"] = python_bin + os.pathsep + self.base_env.get("PATH", "")

    def _cluster(self) -> dict[str, list[str]]:
        """The TensorFlow cluster of the job's current replicas, on their ports."""
        ports = {
            role.value: [r.port for r in self.record.replicas if r.role == role.value]
            for role in Role
        }
        return cluster_spec(self.job.spec.replicas.counts(), local_address(ports))

    # -- the loop -------------------------------------------------------------------

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        # Any signal (a replica exiting: SIGCHLD) wakes the loop at once instead of at the
        # next tick, so a finished chief ends the PS within milliseconds.
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
        now = self.clock()
        self.record.supervisor = ref_of(os.getpid())
        self.record.started_at = self.record.started_at or now
        self.dir.write(self.record)
        self.dir.event(f"supervisor {os.getpid()} started the job")
        data = self.record.data
        if data is not None and data.staging and not self.record.phase.terminal:
            self._stage_data()
        if self.record.tenant is not None and not self.record.phase.terminal:
            failed = self._isolate()
            if failed is not None:
                self._finish(JobPhase.FAILED, *failed)
                self.dir.write(self.record)
        while True:
            changed = self._reap()
            if self.dir.stop_requested.exists() and not self.stop_reason:
                # Checked only after registering above: a stop that found no supervisor
                # yet wrote this file first, so it cannot be missed.
                self.stop_reason = "stopped on request (tfkube stop/delete, or Ctrl-C)"
            changed |= self._observe_progress()
            changed |= self._observe_steps()
            self._sample_usage()
            changed |= self._claim_gpus()
            changed |= self._resize()
            changed |= self._drop_removed()
            if self.stop_reason and not self.record.phase.terminal:
                self._finish(JobPhase.FAILED, "Stopped", self.stop_reason)
                changed = True
            decision = plan(self.job, _status_of(self.record, self.clock()), self.clock())
            changed |= self._apply(decision)
            if changed:
                self.dir.write(self.record)
            if any(isinstance(a, DeleteJob) for a in decision.actions):
                self._delete()
                return 0
            if self.record.phase.terminal and not self.procs and not self._ttl_pending():
                if self.record.tenant is not None:
                    sweep(self._cgroup_prefix())
                self.dir.event("supervisor exits: nothing of the job runs")
                return 0 if self.record.phase is JobPhase.SUCCEEDED else 1
            if select.select([wake_r], [], [], TICK_SECONDS)[0]:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)

    def _stage_data(self) -> None:
        """Fetch the job's data source (as listed at submit) into the team's cache and show
        it at the data folder, before any replica starts. A store failing now ends the job
        (DataStagingFailed, its reason); a stop ends staging at the next chunk."""
        data = self.record.data
        assert data is not None
        listing = json.loads(self.dir.data_source.read_text())
        store = StoreRef.from_json(listing["store"])
        objects = [RemoteObject.from_json(o) for o in listing["objects"]]
        layout = placements(
            objects,
            store,
            listing.get("shard"),
            [(r.role, r.index) for r in self.record.replicas],
            self.job.spec.replicas.count(Role.WORKER),
        )
        needed = {o.key for shown in layout.values() for o in shown}
        objects = [o for o in objects if o.key in needed]  # a PS-only job's shard: none
        data.started_at = self.clock()
        self.dir.write(self.record)
        self.dir.event(
            f"staging data from {data.source}: {data.objects} objects, "
            f"{data.total_bytes / 2**20:.1f} MiB"
        )

        def progress(done: int, _total: int, result: StageResult) -> None:
            data.done_bytes, data.fetched_bytes = done, result.fetched_bytes
            self.dir.write(self.record)

        def cancelled() -> bool:
            return bool(self.stop_reason) or self.dir.stop_requested.exists()

        try:
            allowed = listing.get("allowed")
            result = stage(
                open_store(
                    store,
                    self.data_credentials,
                    None if allowed is None else tuple(ipaddress.ip_network(n) for n in allowed),
                ),
                store,
                objects,
                Path(listing["cache"]),
                Path(self.record.data_dir),
                on_progress=progress,
                cancelled=cancelled,
                layout=layout,
                limit=listing.get("cache_limit"),
            )
        except Cancelled:
            return  # the loop ends the job: Stopped
        except (DataSourceError, OSError) as exc:
            data.finished_at = self.clock()
            self._finish(JobPhase.FAILED, "DataStagingFailed", f"staging {data.source}: {exc}")
            self.dir.write(self.record)
            return
        finally:
            self.data_credentials = None
        data.finished_at = self.clock()
        data.fetched_objects = result.fetched_objects
        data.done_bytes, data.fetched_bytes = result.total_bytes, result.fetched_bytes
        data.shares = {
            k: ShareRecord(files=v.files, bytes=v.bytes, fetched_bytes=v.fetched_bytes)
            for k, v in result.shares.items()
        }
        took = data.finished_at - (data.started_at or data.finished_at)
        self.dir.write(self.record)
        self.dir.event(
            f"data staged from {data.source} in {took:.1f}s: {result.fetched_objects} of "
            f"{result.objects} objects fetched ({result.fetched_bytes / 2**20:.1f} MiB read "
            "from the store), the rest from the cache",
            fetched_bytes=result.fetched_bytes,
        )
        if data.shard is not None:
            for key, share in sorted(data.shares.items()):
                self.dir.event(
                    f"{key}'s shard ({data.shard}): {share.files} files, "
                    f"{share.bytes / 2**20:.1f} MiB ({share.fetched_bytes / 2**20:.1f} MiB "
                    "read from the store)",
                    replica=key,
                )

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stop_reason = f"stopped by signal {signal.Signals(signum).name}"

    def _ttl_pending(self) -> bool:
        return self.job.spec.run_policy.ttl_seconds_after_finished is not None

    # -- a confined job's network -----------------------------------------------------

    def _isolate(self) -> tuple[str, str] | None:
        """Make the job's network namespace and bring in the code and its requirements
        (see the module's doc). None when ready, else (reason, message) to fail with."""
        try:
            self.netns = _netns.create()
        except _netns.NetnsError as exc:
            return "NetworkUnavailable", str(exc)
        self.dir.event("the job's replicas get a network namespace of their own")
        if self.code_url is None:
            return None
        if not self.code_url.startswith("file://"):
            fetched = self._stage_code(self.code_url)
            if isinstance(fetched, str):
                return "CodeUnavailable", fetched
            self.code_url, self.code_token = fetched.as_uri(), None
        archive = Path(self.code_url.removeprefix("file://"))
        t = self.record.tenant
        if self.record.venv or t is None or t.venv_cache is None:
            return None  # made at submit, or the job has no cache to install into
        try:
            names = check_archive(archive).names
        except FetchError as exc:
            return "CodeUnavailable", f"bad code: {exc}"
        if contract.REQUIREMENTS_FILE not in names:
            return None
        return self._prepare()

    def _stage_code(self, url: str) -> Path | str:
        """Download the code into the job's folder (root's; the replicas read it) and
        verify it; the path, else why not."""
        folder = self.dir.artifacts
        folder.mkdir(mode=0o755, exist_ok=True)
        archive = folder / "code.tar.gz"
        problem = ""
        for attempt in range(FETCH_ATTEMPTS):
            if attempt:
                time.sleep(2.0)
            if self.stop_reason or self.dir.stop_requested.exists():
                return "stopped before its code was fetched"
            try:
                digest = download(url, archive, token=self.code_token)
            except FetchError as exc:
                problem = str(exc)
                if exc.permanent:
                    break
                continue
            expected = self.record.artifact_sha256
            if expected and digest != expected:
                archive.unlink(missing_ok=True)
                return f"the code at {url} has SHA-256 {digest}, expected {expected}"
            archive.chmod(0o644)
            self.dir.event("fetched the job's code for its replicas")
            return archive
        return f"cannot fetch the code: {problem}"

    def _prepare(self) -> tuple[str, str] | None:
        """Install the code's requirements.txt into the team's cache: the launcher in
        prepare-only mode, confined as the team, in the job's network namespace with one
        way out, the package-index proxy (`_egress`), for this step only. None when
        done, else why it failed."""
        t = self.record.tenant
        assert t is not None
        assert self.netns is not None
        first = self.record.replicas[0]
        work = self.dir.work / PREPARE_KEY
        env = self._replica_env(first, work, PREPARE_KEY)
        env[contract.PREPARE_ONLY] = "1"
        env.update(_egress.package_env(t.package_indexes, _egress.PORT))
        self.dir.event("installing the code's requirements.txt before the replicas start")
        self.dir.logs.mkdir(exist_ok=True)
        self.dir.termination_log(PREPARE_KEY).unlink(missing_ok=True)
        try:
            proxy = self._start_egress(t.package_indexes, t.fetch_allowed)
        except OSError as exc:
            return "RequirementsFailed", f"cannot start the package index proxy: {exc}"
        try:
            with self.dir.log(first.key).open("ab") as log:
                log.write(b"==== tfkube: installing requirements.txt for the job ====\n")
                log.flush()
                try:
                    proc = self._start_confined(first, env, work, work, log, cgroup=PREPARE_KEY)
                except SandboxError as exc:
                    return "RequirementsFailed", f"cannot install requirements.txt: {exc}"
                while proc.poll() is None:
                    if self.stop_reason or self.dir.stop_requested.exists():
                        stop_trees([ref_of(proc.pid)], 2.0)
                        proc.wait()
                        break
                    time.sleep(TICK_SECONDS)
        finally:
            stop_trees([ref_of(proxy.pid)], 2.0)
            proxy.wait()
        confinement = self.confined.pop(first.key, None)
        if confinement is not None:
            release(confinement)
        if proc.returncode == 0:
            return None
        why = self._termination_message(PREPARE_KEY) or f"exit code {proc.returncode}"
        return "RequirementsFailed", why

    def _start_egress(self, indexes: list[str], ranges: list[str]) -> subprocess.Popen[bytes]:
        """The package-index proxy, listening inside the job's namespace once this
        returns. Raises OSError."""
        assert self.netns is not None
        argv = [sys.executable, "-m", "tfkube.engines.local._egress"]
        argv += ["--netns-fd", str(self.netns), "--port", str(_egress.PORT)]
        for url in indexes:
            argv += ["--index", url]
        for net in ranges:
            argv += ["--allow-range", net]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=None,
            pass_fds=(self.netns,),
            process_group=0,
        )
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30.0)
        line = proc.stdout.readline() if ready else b""
        proc.stdout.close()
        if line.strip() != b"ready":
            stop_trees([ref_of(proc.pid)], 2.0)
            proc.wait()
            raise OSError("it did not start")
        return proc

    # -- observing ------------------------------------------------------------------

    def _reap(self) -> bool:
        changed = False
        for key, proc in list(self.procs.items()):
            code = proc.poll()
            if code is None:
                continue
            del self.procs[key]
            replica = self.record.replica(key)
            replica.ended_at = self.clock()
            replica.process = None
            replica.stalled = False
            replica.step_rate = None
            replica.straggler = False
            self.step_offsets.pop(key, None)
            self.step_samples.pop(key, None)
            self.usage.forget(key)
            confinement = self.confined.pop(key, None)
            oom_killed = confinement is not None and release(confinement) > 0
            if replica.state is not ReplicaState.RUNNING:
                continue  # we stopped it: its exit is no news
            code = contract.exit_status(code)
            if oom_killed and code != 0:
                code = OOM_EXIT_CODE  # whichever of its processes the kernel chose
            replica.exit_code = code
            replica.state = ReplicaState.SUCCEEDED if code == 0 else ReplicaState.FAILED
            replica.message = self._termination_message(key)
            if oom_killed and code != 0:
                replica.message = oom_message(self._resources(replica))
            self.dir.event(
                f"{key} exited with code {code}"
                + (f": {replica.message}" if replica.message else ""),
                replica=key,
                exit_code=code,
            )
            changed = True
        return changed

    def _claim_gpus(self) -> bool:
        """Give the replicas still without their GPUs devices no other running job holds,
        all at once (half a job holding GPUs while it waits for the rest could deadlock
        two jobs). Under a machine-wide lock, with this job's claim written before it is
        released, so two supervisors never hand out one device twice."""
        waiting = [r for r in self.record.replicas if r.gpu_request and len(r.gpus) < r.gpu_request]
        now = self.clock()
        if not waiting or self.record.phase.terminal or now - self.claimed_at < 1.0:
            return False
        self.claimed_at = now
        home = self.dir.root.parent.parent
        with file_lock(home / "gpus.lock"):
            holders: dict[str, list[str]] = {}
            for other in sorted((home / "jobs").iterdir()):
                if other == self.dir.root or other.name.startswith("."):
                    continue
                try:
                    record = JobDir(other).read()
                except (OSError, ValueError):
                    continue
                if record.phase.terminal or alive(record.supervisor) is None:
                    continue
                for r in record.replicas:
                    for gpu in r.gpus:
                        holders.setdefault(gpu, []).append(record.name)
            try:
                given = assign_gpus(
                    [(r.key, r.gpu_request) for r in waiting], available_gpus(), holders
                )
            except NotEnoughGpus as exc:
                users = sorted({name for names in holders.values() for name in names})
                held = f"waiting for GPUs: {exc} (in use by {', '.join(users)})"
                # The whole job waits: a PS started alone would only hold its port.
                unstarted = [r for r in self.record.replicas if r.state is ReplicaState.PENDING]
                if any(r.held != held for r in unstarted):
                    for r in unstarted:
                        r.held = held
                    self.dir.event(held)
                    return True
                return False
            for r in waiting:
                r.gpus = given[r.key]
            for r in self.record.replicas:
                r.held = None
            self.dir.write(self.record)
        self.dir.event("GPUs assigned: " + ", ".join(f"{r.key} {r.gpus}" for r in waiting))
        return True

    def _termination_message(self, key: str) -> str | None:
        text = read_bounded(self.dir.termination_log(key))
        return (text or "").strip() or None

    def _resources(self, replica: ReplicaRecord) -> Resources:
        spec = self.job.spec.replicas.get(Role(replica.role))
        return spec.resources if spec is not None else Resources()

    def _cgroup_prefix(self) -> str:
        return cgroup_prefix(self.record)

    def _observe_progress(self) -> bool:
        """With stall detection on: when each running replica last made progress (its
        log grew, or anything in the shared log/checkpoint folder was written)."""
        if self.job.spec.run_policy.stall_seconds is None:
            return False
        now = self.clock()
        if now - self.observed_at < PROGRESS_EVERY:
            return False
        self.observed_at = now
        shared = latest_write(Path(self.record.log_dir))
        changed = False
        for r in self.record.replicas:
            if r.state is not ReplicaState.RUNNING:
                continue
            try:
                own = self.dir.log(r.key).stat().st_mtime
            except OSError:
                own = 0.0
            latest = max(r.started_at or 0.0, own, shared)
            if r.progress_at is None or latest > r.progress_at:
                r.progress_at = latest
                changed = True
        return changed

    def _observe_steps(self) -> bool:
        """Each running training replica's step rate from its `tfkube-steps: N` lines, and
        which are stragglers (`tfkube.planner.stragglers`); an event when one becomes or
        stops being one."""
        now = self.clock()
        if now - self.steps_at < STEPS_EVERY:
            return False
        self.steps_at = now
        window = float(self.job.spec.run_policy.straggler_seconds)
        training = [
            r
            for r in self.record.replicas
            if r.state is ReplicaState.RUNNING and r.role in TRAINING_ROLES
        ]
        seen = {r.key: self._new_steps(r.key) for r in training}
        judged = judge_steps(self.record.replicas, self.step_samples, seen, now, window)
        changed = False
        for r in self.record.replicas:
            rate, flagged = judged.rates.get(r.key), r.key in judged.slow
            if (rate, flagged) != (r.step_rate, r.straggler):
                r.step_rate, r.straggler = rate, flagged
                changed = True
        for key, message in judged.events:
            self.dir.event(message, replica=key)
        return changed

    def _new_steps(self, key: str) -> int | None:
        """The last `tfkube-steps: N` the replica printed since the last look."""
        offset = self.step_offsets.get(key)
        if offset is None:
            return None
        try:
            with self.dir.log(key).open("rb") as log:
                size = os.fstat(log.fileno()).st_size
                if size <= offset:
                    return None
                start = max(offset, size - MAX_STEPS_READ)
                log.seek(start)
                data = log.read(size - start)
        except OSError:
            return None
        cut = data.rfind(b"\n") + 1  # a line still being written waits for the next look
        if cut == 0:
            return None
        self.step_offsets[key] = start + cut
        # Read from the middle of a line (output skipped): that line's end is no line.
        skip = data.find(b"\n") + 1 if start > offset else 0
        return steps_in(data[skip:cut].decode(errors="replace"))

    def _sample_usage(self) -> None:
        """Each running replica's CPU and memory, kept with the job's logs (`_usage.py`)."""
        now = self.clock()
        if not self.usage.due(now):
            return
        self.usage.sampled_at = now
        for r in self.record.replicas:
            if r.state is not ReplicaState.RUNNING or r.process is None:
                continue
            confinement = self.confined.get(r.key)
            if confinement is not None and self.cgroups is not None:
                reading = read_cgroup(self.cgroups, confinement.cgroup, now)
            else:
                reading = read_tree(r.process.pid, now)
            self.usage.record(r.key, reading)

    # -- acting ---------------------------------------------------------------------

    def _apply(self, decision: Decision) -> bool:
        changed = False
        record = self.record
        if decision.finished:
            # `_finish` records the end with its reason; the planner's own line for it
            # would say the same thing twice in the job's events.
            self._finish(decision.phase, decision.reason or "", decision.message or "")
            changed = True
        else:
            for line in decision.events:
                self.dir.event(line)
            if decision.phase is not record.phase:
                self.dir.event(f"job is {decision.phase.value}")
                record.phase = decision.phase
                changed = True
        if decision.restarts != record.restarts:
            record.restarts = decision.restarts
            changed = True
        for r in record.replicas:
            stalled = r.key in decision.stalled
            if stalled != r.stalled:
                r.stalled = stalled
                quiet = self.clock() - (r.progress_at or self.clock())
                r.message = f"no progress for {quiet:.0f}s" if stalled else None
                changed = True

        # Stop first, all trees at once: a PS must be gone in a second, not in turn.
        to_stop: list[Stop | Restart] = [
            a for a in decision.actions if isinstance(a, Stop | Restart)
        ]
        refs = []
        for action in to_stop:
            replica = record.replica(action.key)
            if isinstance(action, Restart):
                if replica.state is ReplicaState.RUNNING and action.key in self.procs:
                    self.dir.event(f"stopping {action.key}: {action.reason}", replica=action.key)
                replica.state = ReplicaState.BACKOFF
                replica.next_start_at = action.at
                replica.restarts += 1
            elif replica.state is not ReplicaState.STOPPED:
                if replica.state is ReplicaState.RUNNING:
                    self.dir.event(f"stopping {action.key}: {action.reason}", replica=action.key)
                replica.state = replica.state.after_stop
            if replica.process is not None:
                refs.append(replica.process)
            changed = True
        if refs:
            stop_trees(refs, self.job.spec.run_policy.termination_grace_seconds)
            self._reap()

        for start in decision.actions:
            if isinstance(start, Start):
                self._start(record.replica(start.key))
                changed = True
        return changed

    def _resize(self) -> bool:
        """A `tfkube scale` request (the job folder's `scale` file): the new count goes to
        job.yaml (still the one place it is written), added workers become pending
        replicas on free ports (the planner starts them; their cluster lists every current
        worker), removed ones (the highest indexes) are stopped, their trees all at once,
        and dropped from the job's replicas. Neither is a failure nor a restart. The PS and
        the other workers are not touched (`tfkube.planner.Resize`)."""
        path = self.dir.scale_requested
        try:
            text = path.read_text()
        except FileNotFoundError:
            return False
        path.unlink(missing_ok=True)
        try:
            workers = int(json.loads(text)["workers"])
        except (ValueError, KeyError, TypeError) as exc:
            self.dir.event(f"scale refused: unreadable request {text[:80]!r} ({exc})")
            return False
        problems = scale_problems(self.job, self.record.phase, workers)
        if problems:
            self.dir.event(
                "scale refused: " + "; ".join(f"{e.field}: {e.message}" for e in problems)
            )
            return False
        resize = Resize(self.job.spec.replicas.count(Role.WORKER), workers)
        if not resize.added and not resize.removed:
            self.dir.event(resize.text())
            return False
        job = scaled_job(self.job, workers)
        tmp = self.dir.spec.with_name(f".job.{os.getpid()}.tmp")
        tmp.write_text(dump_job(job))
        tmp.replace(self.dir.spec)
        self.job = job
        record = self.record
        leaving = [record.replica(replica_key(Role.WORKER.value, i)) for i in resize.removed]
        refs = []
        for replica in leaving:
            if replica.state is ReplicaState.RUNNING:
                self.dir.event(f"stopping {replica.key}: scaled down", replica=replica.key)
            replica.state = replica.state.after_stop
            if replica.process is not None:
                refs.append(replica.process)
        if refs:
            stop_trees(refs, self.job.spec.run_policy.termination_grace_seconds)
        self._reap()  # the leaving workers leave the record in _drop_removed, once reaped
        spec = job.spec.replicas.get(Role.WORKER)
        for index, port in zip(resize.added, free_ports(len(resize.added)), strict=True):
            record.replicas.append(
                ReplicaRecord(
                    role=Role.WORKER.value,
                    index=index,
                    port=port,
                    gpu_request=spec.resources.gpu if spec else 0,
                )
            )
        record.replicas.sort(key=lambda r: replica_order(r.role, r.index))
        self.cluster = self._cluster()
        self.dir.event(resize.text(), workers=workers)
        return True

    def _drop_removed(self) -> bool:
        """Workers a scale-down removed leave the record here, once reaped (right after
        `_resize` stopped them, or at a later turn: under a CI run's load one outlived its
        stop, and the job showed its old size for good when only `_resize` dropped them).
        One still running is stopped again, by its Popen's PID (our child, not yet reaped:
        the PID cannot have been reused)."""
        count = self.job.spec.replicas.count(Role.WORKER)
        removed = [
            r for r in self.record.replicas if r.role == Role.WORKER.value and r.index >= count
        ]
        if not removed:
            return False
        refs = []
        for replica in removed:
            proc = self.procs.get(replica.key)
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    refs.append(ref_of(proc.pid))
        if refs:
            stop_trees(refs, 0.0)
            self._reap()
        gone = {r.key for r in removed if r.key not in self.procs}
        if not gone:
            return False
        self.record.replicas = [r for r in self.record.replicas if r.key not in gone]
        self.cluster = self._cluster()
        return True

    def _finish(self, phase: JobPhase, reason: str, message: str) -> None:
        self.record.phase = phase
        self.record.reason = reason
        self.record.message = message
        self.record.finished_at = self.clock()
        self.dir.event(f"job {phase.value} ({reason}): {message}")

    def _replica_env(
        self, replica: ReplicaRecord, work: Path, termination: str | None = None
    ) -> dict[str, str]:
        """A replica's environment: its contract, on top of the job's base environment."""
        return {
            **self.base_env,
            **replica_environment(
                self.job,
                Role(replica.role),
                self.cluster,
                code_url=self.code_url,
                code_sha256=self.record.artifact_sha256 or None,
                data_dir=self._data_dir_of(replica),
                log_dir=self.record.log_dir,
                work_dir=str(work),
                termination_log=str(self.dir.termination_log(termination or replica.key)),
                index=replica.index,
                venv=self.record.venv,
                # Made at submit when the code was staged here; else (code fetched by
                # each replica with a token) the first launcher installs it, shared.
                venv_cache=None if self.record.venv else str(tfkube_cache() / "venvs"),
            ),
            contract.JOB_UID: self.record.uid,
            "CUDA_VISIBLE_DEVICES": ",".join(replica.gpus),
        }

    def _data_dir_of(self, replica: ReplicaRecord) -> str:
        """TFKUBE_DATA_DIR: the job's data folder, or with a shard rule the replica's own
        folder in it (its shard only)."""
        data = self.record.data
        if data is not None and data.shard is not None:
            return str(Path(self.record.data_dir) / replica.key)
        return self.record.data_dir

    def _start(self, replica: ReplicaRecord) -> None:
        key = replica.key
        work = self.dir.work / key
        env = self._replica_env(replica, work)
        self.dir.logs.mkdir(exist_ok=True)
        self.dir.termination_log(key).unlink(missing_ok=True)
        # Without code a command runs where its launcher starts: workingDir (checked at
        # submit), else the replica's own work folder.
        spec = self.job.spec.replicas.get(Role(replica.role))
        cwd = self.dir.root
        if self.code_url is None:
            cwd = Path(spec.working_dir) if spec and spec.working_dir else work
            cwd.mkdir(parents=True, exist_ok=True)
        attempt = replica.restarts
        with self.dir.log(key).open("ab") as log:
            log.write(f"==== tfkube: {key} start (restart {attempt}) ====\n".encode())
            log.flush()
            try:
                if self.record.tenant is None:
                    env[contract.PARENT_PID] = str(os.getpid())
                    proc = self._popen([sys.executable, "-m", "tfkube.launcher"], env, cwd, log)
                else:
                    proc = self._start_confined(replica, env, work, cwd, log)
            except SandboxError as exc:
                log.write(f"==== tfkube: {key} could not start: {exc} ====\n".encode())
                self._not_started(replica, str(exc))
                return
        self.procs[key] = proc
        with contextlib.suppress(OSError):
            self.step_offsets[key] = self.dir.log(key).stat().st_size
        self.step_samples.pop(key, None)
        self.usage.forget(key)
        replica.process = ref_of(proc.pid)
        replica.state = ReplicaState.RUNNING
        replica.started_at = self.clock()
        replica.next_start_at = None
        replica.exit_code = None
        replica.message = None
        replica.progress_at = replica.started_at
        self.dir.event(
            f"started {key} (pid {proc.pid}, restart {attempt})", replica=key, pid=proc.pid
        )

    @staticmethod
    def _popen(
        argv: list[str], env: dict[str, str], cwd: Path, log: BinaryIO, fds: tuple[int, ...] = ()
    ) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=fds,
            # Its own process group (to signal the replica as a whole), but not its own
            # session: Linux's autogroup scheduler shares CPU between sessions, so one
            # session per replica would hand a mostly idle PS as much CPU as a busy
            # worker. All replicas of a job share the supervisor's session. (Confined,
            # the cgroups share it instead, by each role's CPU request.)
            process_group=0,
        )

    def _start_confined(
        self,
        replica: ReplicaRecord,
        env: dict[str, str],
        work: Path,
        cwd: Path,
        log: BinaryIO,
        cgroup: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """The launcher in its sandbox, as the team: its work folder (its HOME), the log
        folder and the data folder the team's (the data read-only when it came with
        files), in the job's network namespace (`cgroup` given: the prepare step).
        Raises SandboxError."""
        t = self.record.tenant
        assert t is not None
        tenant = TenantIdentity(t.user, t.uid, t.gid)
        try:
            hand_over(work, tenant)
            hand_over(Path(self.record.log_dir), tenant)
        except OSError as exc:
            raise SandboxError(f"cannot hand its folders to team user {t.user}: {exc}") from None
        env = {**passed_environment(os.environ, t.passed_env), **env}
        if self.code_token is not None:
            env[contract.CODE_TOKEN] = self.code_token
        env.pop(contract.VENV_CACHE, None)  # the machine-wide cache: other teams read it
        if t.venv_cache is not None:
            env[contract.VENV_CACHE] = t.venv_cache
        read_only: list[str] = []
        read_write = [str(work), self.record.log_dir]
        (read_only if t.data_read_only else read_write).append(self.record.data_dir)
        if self.record.venv:
            read_only.append(self.record.venv)
        if self.code_url is not None and self.code_url.startswith("file://"):
            read_only.append(str(self.dir.artifacts))  # staged here at submit
        if t.venv_cache:
            read_write.append(t.venv_cache)
        confinement = confinement_for(
            tenant,
            cgroup=f"{self._cgroup_prefix()}{cgroup or f'{replica.key}.{replica.restarts}'}",
            cwd=str(cwd if cwd != self.dir.root else work),
            read_only=read_only,
            read_write=read_write,
            hidden=t.hidden,
            env=env,
            limits=limits_of(self._resources(replica)),
            devices=[f"/dev/nvidia{gpu}" for gpu in replica.gpus],
            netns=self.netns,
        )
        with launch([sys.executable, "-m", "tfkube.launcher"], confinement) as start:
            try:
                # bwrap itself gets this process's environment (the sandbox gets none of
                # it): tools that follow process trees by an inherited tag still can.
                proc = self._popen(start.argv, dict(os.environ), Path("/"), log, start.pass_fds)
            except OSError as exc:
                release(confinement)
                raise SandboxError(f"cannot start its sandbox: {exc}") from None
        self.confined[replica.key] = confinement
        return proc

    def _not_started(self, replica: ReplicaRecord, why: str) -> None:
        """A start that failed before any process ran: an infrastructure fault (retried
        as EX_TEMPFAIL, per the restart policy)."""
        replica.state = ReplicaState.FAILED
        replica.exit_code = contract.EX_TEMPFAIL
        replica.message = f"could not start: {why}"
        replica.started_at = replica.ended_at = self.clock()
        replica.process = None
        self.dir.event(f"{replica.key} could not start: {why}", replica=replica.key)

    def _delete(self) -> None:
        stop_trees([r.process for r in self.record.replicas if r.process is not None], 2.0)
        self._reap()  # releases the confined replicas' cgroups
        if self.record.tenant is not None:
            sweep(self._cgroup_prefix())
        self.dir.event("TTL passed: deleting the job")
        if self.record.data is not None:  # a staged data source is read-only
            writable_tree(self.dir.root / "data")
        shutil.rmtree(self.dir.root, ignore_errors=True)


def spawn(job_dir: JobDir, fork: bool = False) -> None:
    """Start the job's supervisor as a daemon (its own session, re-parented to init, so
    that whoever started it never has to reap it) and return once it is detached.

    `fork=True` forks this very process instead of starting a new interpreter: the CLI,
    single-threaded and with tfkube already imported, saves ~0.3 s per job that way.
    Library callers (which may have threads) use the default, a fresh interpreter."""
    with job_dir.supervisor_log.open("ab") as log:
        if not fork:
            # A failure shows in the log, which the caller reads while it waits.
            subprocess.run(
                [sys.executable, "-m", "tfkube.engines.local", "--daemonize", str(job_dir.root)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
                # Out of the caller's session from the start: a Ctrl-C in the caller's
                # terminal must never reach the supervisor (the caller decides to stop).
                start_new_session=True,
            )
            return
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
        if child != 0:
            os.waitpid(child, 0)
            return
        _daemonize_and_run(job_dir, log.fileno())


def _daemonize_and_run(job_dir: JobDir, log_fd: int) -> NoReturn:
    """In a child: new session, fork again, point stdio at the log, supervise, exit."""
    code = 1
    try:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        code = Supervisor(job_dir).run()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str]) -> int:
    """`JOB_DIR` runs the supervisor in this process; `--daemonize JOB_DIR` as a daemon."""
    daemonize = argv[:1] == ["--daemonize"]
    args = argv[1:] if daemonize else argv
    if len(args) != 1:
        print("usage: python -m tfkube.engines.local [--daemonize] JOB_DIR", file=sys.stderr)
        return 2
    job_dir = JobDir(Path(args[0]))
    if daemonize:
        if os.fork() == 0:
            _daemonize_and_run(job_dir, sys.stdout.fileno())
        return 0
    return Supervisor(job_dir).run()
