"""Upgrading the operator under running jobs (issue 18 point 6), on the control plane with
KWOK nodes: the released operator of 2026-12-02 (tests/release.py: commit 3b451d0, run from
this repository's history) makes a TFJob's Jobs, pods and Service; it is stopped with the
job running and today's operator started in its place. The job finishes untouched: not one
of its pods replaced, its Jobs the same objects, 0 restarts, one Created and one Succeeded
event, its PS gone after success. A new operator that re-rendered the old Jobs differently
(a changed pod template is refused by the API server, a deleted Job restarts its pods)
would show here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from release import release_source

from ._support import KubeCluster, Operator, wait_for
from .test_operator import events, job_dict, phase_is, pods, submit


def test_a_new_operator_takes_over_running_jobs_untouched(
    crd: KubeCluster,
    operator_kubeconfig: Path,
    kube_namespace: str,
    code: Path,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    kube, ns = crd, kube_namespace
    old_src = release_source(tmp_path_factory.mktemp("release"))
    log = tmp_path / "operator.log"
    old = Operator(kube, ns, log, operator_kubeconfig, env={"PYTHONPATH": str(old_src)})
    old.start()
    new: Operator | None = None
    try:
        data = job_dict("rolled", runPolicy={"successPolicy": "AllWorkers"})
        data["spec"]["replicas"]["worker"]["annotations"] = {"tfkube.io/fake-duration": "12s"}
        submit(kube, ns, code, data)
        wait_for("running", lambda: phase_is(kube, ns, "rolled", "Running"), 60)
        wait_for("3 pods", lambda: len(pods(kube, ns, "tfkube.io/job-name=rolled")) == 3, 30)
        made = pods(kube, ns, "tfkube.io/job-name=rolled")
        before = {p.metadata.name: p.metadata.uid for p in made}
        jobs = kube.batch.list_namespaced_job(ns, label_selector="tfkube.io/job-name=rolled")
        job_uids = {j.metadata.name: j.metadata.uid for j in jobs.items}
        old.kill()  # SIGTERM: as a Deployment's roll stops it
        assert not old.errors(), log.read_text()[-5000:]

        new = Operator(kube, ns, log, operator_kubeconfig)
        new.start()
        status = wait_for("success", lambda: phase_is(kube, ns, "rolled", "Succeeded"), 90)
        assert status["restarts"] == 0
        assert status["replicaStatuses"]["worker"]["succeeded"] == 2
        workers = {
            p.metadata.name: p.metadata.uid for p in pods(kube, ns, "tfkube.io/replica-type=worker")
        }
        assert workers == {k: v for k, v in before.items() if "-worker-" in k}
        jobs = kube.batch.list_namespaced_job(ns, label_selector="tfkube.io/job-name=rolled")
        assert {j.metadata.name: j.metadata.uid for j in jobs.items} == job_uids
        reasons = [e.reason for e in events(kube, ns, "rolled")]
        assert reasons.count("Created") == 1, reasons
        assert reasons.count("Succeeded") == 1, reasons
        wait_for("PS gone", lambda: not pods(kube, ns, "tfkube.io/replica-type=ps"), 30)
        assert not new.errors(), log.read_text()[-5000:]
        assert "Forbidden" not in log.read_text(), log.read_text()[-5000:]
    finally:
        old.kill()
        if new is not None:
            new.kill()
