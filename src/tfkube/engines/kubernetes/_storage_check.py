"""What `tfkube install` finds out about a cluster's storage before it applies anything,
and what it says it will do (`plan_storage`, pure; `find_storage` reads the cluster).

    the cluster's StorageClasses        is one the default? (annotation
                                        storageclass.kubernetes.io/is-default-class)
    the claims the admin named          do they exist in the server's namespace, bound?
      -> notes   what jobs and the server get, said to the administrator
         refusals what can never work: install stops before applying anything

Jobs never need a claim (one is made only when a job asks: `tfkube.render._storage`), so
for them install only says what happens. The server's data folder (SQLite, every uploaded
code and data set) must outlive its pod: without a default StorageClass, and with neither
`--storage-class` nor `--data-claim`, its claim would stay Pending and the server never
start, so install refuses and says what to give instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfkube.kube.errors import Forbidden, NotFound
from tfkube.kube.resources import PERSISTENT_VOLUME_CLAIM, STORAGE_CLASS
from tfkube.kube.rest import Kube
from tfkube.render import (
    DATABASE_SECRET,
    POSTGRES_NAME,
    SERVER_NAME,
    ServerInstall,
    StorageDefaults,
    data_claim_name,
    database_claim_name,
)

DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
UNREAD = "unread"
"""A named claim's phase when the installer may not read claims there."""


@dataclass(frozen=True)
class StorageFindings:
    """What the cluster has, as far as install may read it."""

    classes: tuple[str, ...] | None
    """Every StorageClass; None: the installer may not list them."""
    default_classes: tuple[str, ...] = ()
    claims: Mapping[str, str | None] = field(default_factory=dict)
    """A claim the administrator named, in the install namespace -> its phase (`Bound`,
    `Pending`, ...), None when it does not exist, `unread` when it may not be read."""


@dataclass(frozen=True)
class StoragePlan:
    notes: tuple[str, ...]
    """What jobs and the server get, in words (said before anything is applied)."""
    refusals: tuple[str, ...]
    """What can never work as asked: install applies nothing."""


def default_classes(classes: list[Mapping[str, Any]]) -> tuple[str, ...]:
    """The StorageClasses marked default (Kubernetes picks the newest when several are)."""
    return tuple(
        sorted(
            str(c["metadata"]["name"])
            for c in classes
            if any(
                ((c.get("metadata") or {}).get("annotations") or {}).get(a) == "true"
                for a in DEFAULT_CLASS_ANNOTATIONS
            )
        )
    )


def find_storage(kube: Kube, namespace: str, server: ServerInstall | None) -> StorageFindings:
    """Read the StorageClasses and the claims `server` names (nothing else is read)."""
    listed = kube.request("GET", STORAGE_CLASS.url(None), allow=(Forbidden,))
    items: list[Mapping[str, Any]] | None = None
    if isinstance(listed, Mapping):
        items = list(listed.get("items") or [])
    named = (
        [] if server is None else [server.data_claim, server.outputs_claim, server.database_claim]
    )
    claims: dict[str, str | None] = {}
    for claim in filter(None, named):
        try:
            found = kube.request(
                "GET", PERSISTENT_VOLUME_CLAIM.url(namespace, claim), allow=(NotFound,)
            )
        except Forbidden:
            claims[claim] = UNREAD
            continue
        claims[claim] = (
            str(((found.get("status") or {}).get("phase")) or "Pending")
            if isinstance(found, Mapping)
            else None
        )
    return StorageFindings(
        classes=None if items is None else tuple(sorted(str(c["metadata"]["name"]) for c in items)),
        default_classes=default_classes(items or []),
        claims=claims,
    )


def _class_list(found: StorageFindings) -> str:
    return ", ".join(found.classes or ()) or "none"


def _missing_class(found: StorageFindings, flag: str, name: str) -> str | None:
    """The refusal of a StorageClass the cluster does not have (None: it has it, or the
    classes could not be read)."""
    if found.classes is None or name in found.classes:
        return None
    return f"{flag} {name}: this cluster has no such StorageClass (it has: {_class_list(found)})"


def _jobs(found: StorageFindings, jobs: StorageDefaults) -> tuple[list[str], list[str]]:
    notes: list[str] = []
    refusals: list[str] = []
    if jobs.logs_storage_class:
        missing = _missing_class(found, "--logs-storage-class", jobs.logs_storage_class)
        if missing is not None:
            refusals.append(missing)
        else:
            notes.append(
                "jobs whose spec names no logs storage get a new claim <job>-logs "
                f"({jobs.logs_size}, ReadWriteMany) of the StorageClass "
                f"{jobs.logs_storage_class}, shared by their replicas"
            )
        return notes, refusals
    if jobs.logs_claim:
        notes.append(
            "jobs whose spec names no logs storage write their logs in a folder of the "
            f"claim {jobs.logs_claim} of their namespace: make it (ReadWriteMany) in every "
            "namespace jobs run in; a job whose namespace lacks it waits, and `tfkube "
            "status` says why"
        )
        return notes, refusals
    notes.append(
        "a job gets a claim only when it asks for one (spec.storage, a TensorBoard); the "
        "others keep logs and checkpoints in their pods (emptyDir): logs are read from "
        "the pods while they exist, and a whole-job restart starts from scratch "
        "(--logs-storage-class or --logs-claim keeps every job's logs)"
    )
    if found.classes is None:
        notes.append("could not list StorageClasses (forbidden): not checked")
    elif found.default_classes:
        notes.append(
            "a claim a job asks for without naming a class gets the default StorageClass "
            f"{found.default_classes[-1]}"
        )
    else:
        notes.append(
            "this cluster has no default StorageClass: a claim a job asks for without "
            "naming a class stays Pending until an administrator binds it (and `tfkube "
            f"status` says so); StorageClasses: {_class_list(found)}"
        )
    return notes, refusals


def _server(
    found: StorageFindings, namespace: str, server: ServerInstall
) -> tuple[list[str], list[str]]:
    notes: list[str] = []
    refusals: list[str] = []
    claim = data_claim_name(server)
    if server.data_claim and server.storage_class:
        refusals.append(
            "--data-claim names an existing claim and --storage-class one to make: give one"
        )
    elif server.data_claim:
        notes.append(_named_claim(found, namespace, server.data_claim, "its data folder"))
    elif server.storage_class:
        missing = _missing_class(found, "--storage-class", server.storage_class)
        if missing is not None:
            refusals.append(missing)
        else:
            notes.append(
                f"the server keeps its data on a new claim {claim} ({server.storage_size}) "
                f"of the StorageClass {server.storage_class}"
            )
    elif found.classes is None:
        notes.append(
            f"the server keeps its data on a new claim {claim} of the default StorageClass "
            "(could not list StorageClasses: not checked)"
        )
    elif found.default_classes:
        notes.append(
            f"the server keeps its data on a new claim {claim} ({server.storage_size}) of "
            f"the default StorageClass {found.default_classes[-1]}"
        )
    else:
        refusals.append(
            f"this cluster has no default StorageClass, so the server's data claim {claim} "
            "would never be bound and the server never start. Its data folder holds every "
            "uploaded code and data set, its signing key and SQLite's database (unless the "
            f"Secret {DATABASE_SECRET} names an external one): it must outlive the pod, so "
            "it is never an emptyDir. Give --storage-class NAME (StorageClasses: "
            f"{_class_list(found)}), or --data-claim NAME: a claim you made in namespace "
            f"{namespace}, bound to a volume you provide"
        )
    if server.outputs_claim:
        notes.append(
            _named_claim(found, namespace, server.outputs_claim, "the teams' kept outputs")
        )
    more, refused = _database(found, namespace, server)
    return notes + more, refusals + refused


def _database(
    found: StorageFindings, namespace: str, server: ServerInstall
) -> tuple[list[str], list[str]]:
    """Where PostgreSQL keeps its data (`--database postgres`), or where the external
    database's URL comes from."""
    if server.database == "external":
        return [
            f"the server connects to the PostgreSQL named by the Secret {DATABASE_SECRET} "
            f"(key url) in namespace {namespace}: its pod waits until the Secret exists and "
            "the database answers"
        ], []
    if server.database != "postgres":
        return [], []
    if server.database_claim:
        return [
            _named_claim(
                found, namespace, server.database_claim, "its data", "PostgreSQL", "database"
            )
        ], []
    claim = database_claim_name(None)
    size = server.database_size
    if server.storage_class:
        if _missing_class(found, "--storage-class", server.storage_class) is not None:
            return [], []  # refused once already, for the server's data claim
        return [
            f"PostgreSQL keeps its data on a new claim {claim} ({size}) of the "
            f"StorageClass {server.storage_class}"
        ], []
    if found.classes is None:
        return [
            f"PostgreSQL keeps its data on a new claim {claim} of the default StorageClass "
            "(could not list StorageClasses: not checked)"
        ], []
    if found.default_classes:
        return [
            f"PostgreSQL keeps its data on a new claim {claim} ({size}) of the default "
            f"StorageClass {found.default_classes[-1]}"
        ], []
    return [], [
        f"this cluster has no default StorageClass, so PostgreSQL's claim {claim} would "
        "never be bound and the database never start. Give --storage-class NAME "
        f"(StorageClasses: {_class_list(found)}), or --database-claim NAME: a claim you made "
        f"in namespace {namespace}, bound to a volume you provide"
    ]


def _named_claim(
    found: StorageFindings,
    namespace: str,
    claim: str,
    what: str,
    who: str = "the server",
    component: str = "server",
) -> str:
    phase = found.claims.get(claim, UNREAD)
    where = f"claim {claim} in namespace {namespace}"
    pod = f"{who}'s pod ({POSTGRES_NAME if component == 'database' else SERVER_NAME})"
    if phase == "Bound":
        return f"{who} mounts {what} from the {where} (Bound)"
    if phase is None:
        return (
            f"warning: the {where} ({what}) does not exist yet: {who}'s pod waits "
            f"(Pending) until it exists and is bound; `kubectl -n {namespace} describe pod "
            f"-l app.kubernetes.io/component={component}` says why it waits"
        )
    if phase == UNREAD:
        return f"{who} mounts {what} from the {where} (not checked: may not read it)"
    return f"warning: the {where} ({what}) is {phase}: {pod} starts once it is bound"


def plan_storage(
    found: StorageFindings,
    namespace: str,
    server: ServerInstall | None = None,
    jobs: StorageDefaults | None = None,
) -> StoragePlan:
    """What install will do about storage, and what it refuses (see the module docstring)."""
    notes, refusals = _jobs(found, jobs or StorageDefaults())
    if server is not None:
        more, refused = _server(found, namespace, server)
        notes += more
        refusals += refused
    return StoragePlan(tuple(notes), tuple(refusals))
