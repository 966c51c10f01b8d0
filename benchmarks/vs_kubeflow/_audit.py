"""Who asked the API server for what: its audit log, one JSON line per finished request
(level Metadata: user, user agent, verb, object reference, status code; no bodies), except
pod status patches, kept with their bodies (level Request): the fake kubelet's, whose
repeats tell whether KWOK's second play of a stage changed the pod (`StatusPlays`).

The benchmark gives every actor it starts its own ServiceAccount token, so the operators,
the plain client and the benchmark's own watches are told apart by user; the control
plane's components share the admin token and are told apart by user agent
(`kube-controller-manager/v1.34.4 (...) .../job-controller` -> `kcm/job-controller`).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Request
  resources: [{group: "", resources: ["pods/status"]}]
  verbs: ["patch"]
- level: Metadata
"""

SA_PREFIX = "system:serviceaccount:"


NEVER_MB = 1 << 20  # a megabyte count no run reaches (1 TiB)


def apiserver_args(workdir: Path) -> tuple[str, ...]:
    policy = workdir / "audit-policy.yaml"
    policy.write_text(POLICY)
    return (
        f"--audit-policy-file={policy}",
        f"--audit-log-path={workdir / 'audit.log'}",
        # one file, never rotated: the benchmark reads it by offset. 0 is not "never": the
        # API server's log writer (lumberjack) then rotates at its default, 100 MB, which an
        # 11,000-replica run passes (its second runner's requests were lost so, 2026-12-04)
        f"--audit-log-maxsize={NEVER_MB}",
    )


def component(entry: dict[str, Any]) -> str:
    """The actor: a ServiceAccount's name, else the client program (from the user agent)."""
    user = (entry.get("user") or {}).get("username", "")
    if user.startswith(SA_PREFIX):
        return user.rsplit(":", 1)[-1]
    agent = entry.get("userAgent") or "unknown"
    program = agent.split("/", 1)[0]
    if program == "Python-urllib":
        return "bench-admin"  # tools/kube/cluster.py's admin requests: set-up and clean-up
    if program == "kube-controller-manager":
        return "kcm/" + agent.rsplit("/", 1)[-1]
    return program


@dataclass
class StatusPlays:
    """The pod status patches of one window (KWOK's, in the benchmark): KWOK plays a stage
    again for an event that still shows a pod's old state, and whether that second play
    changes the pod depends on what its status template writes (tools/kube/stages)."""

    patches: int = 0
    """Pod status patches answered 200."""
    again: int = 0
    """... that set a phase the same pod's earlier patch had set (a stage played again)."""
    again_differing: int = 0
    """... of those, with a body unlike the earlier one: a change every pod watcher gets."""
    _seen: dict[tuple[str, str], bytes] = field(default_factory=dict, repr=False)

    def add(self, pod: str, body: dict[str, Any]) -> None:
        self.patches += 1
        key = (pod, str((body.get("status") or {}).get("phase")))
        text = json.dumps(body, sort_keys=True).encode()
        seen = self._seen.get(key)
        if seen is None:
            self._seen[key] = text
            return
        self.again += 1
        self.again_differing += seen != text

    def summary(self) -> dict[str, int]:
        return {
            "patches": self.patches,
            "again": self.again,
            "again_differing": self.again_differing,
        }


@dataclass
class Requests:
    """Requests of one time window."""

    by_component: Counter[str] = field(default_factory=Counter)
    by_component_verb: Counter[tuple[str, str]] = field(default_factory=Counter)
    created: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(component, resource) -> objects created in the run's namespace (2xx creates)."""
    calls: Counter[str] = field(default_factory=Counter)
    """"component verb resource[/subresource] code" -> requests: what each actor asked and
    how it was answered (a conflict, 409, is work done twice)."""
    status_plays: StatusPlays = field(default_factory=StatusPlays)

    def top_calls(self, n: int = 16) -> dict[str, int]:
        return dict(self.calls.most_common(n))

    def total(self) -> int:
        return sum(self.by_component.values())

    def of(self, who: str) -> int:
        return self.by_component.get(who, 0)

    def verbs(self, who: str) -> dict[str, int]:
        return {v: n for (c, v), n in sorted(self.by_component_verb.items()) if c == who}

    def creates(self, who: str | None = None, events: bool = False) -> dict[str, int]:
        """Objects created (by `who`, or by anyone), per resource; Events apart."""
        out: Counter[str] = Counter()
        for (c, resource), n in self.created.items():
            if (who is None or c == who) and (resource == "events") == events:
                out[resource] += n
        return dict(sorted(out.items()))


class AuditLog:
    """Reads the log incrementally: each `window` call consumes the lines written since the
    previous call and keeps those received in [start, end] (epoch seconds)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def window(self, start: float, end: float, namespace: str) -> Requests:
        out = Requests()
        if not self.path.exists():
            return out
        with self.path.open("rb") as f:
            if os.fstat(f.fileno()).st_size < self.offset:
                raise SystemExit(
                    f"{self.path} is shorter than what was read of it: it was rotated, and "
                    "the requests of this window are not all in it"
                )
            f.seek(self.offset)
            data = f.read()
        complete = data.rfind(b"\n") + 1  # a line being written is read next time
        self.offset += complete
        for line in data[:complete].splitlines():
            entry = json.loads(line)
            at = datetime.fromisoformat(
                entry["requestReceivedTimestamp"].replace("Z", "+00:00")
            ).timestamp()
            if not start <= at <= end:
                continue
            who, verb = component(entry), entry.get("verb", "")
            out.by_component[who] += 1
            out.by_component_verb[(who, verb)] += 1
            ref = entry.get("objectRef") or {}
            code = (entry.get("responseStatus") or {}).get("code", 0)
            what = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
            out.calls[f"{who} {verb} {what or '-'} {code}"] += 1
            # a pod's binding (a subresource) is not a new object
            new = verb == "create" and 200 <= code < 300 and not ref.get("subresource")
            if new and ref.get("namespace") == namespace:
                out.created[(who, ref.get("resource", ""))] += 1
            status = ref.get("resource") == "pods" and ref.get("subresource") == "status"
            if status and verb == "patch" and code == 200 and ref.get("namespace") == namespace:
                out.status_plays.add(ref.get("name", ""), entry.get("requestObject") or {})
        return out
