"""One unprivileged OS identity per team (a tenant), stable across server restarts.

A tenant is a folder (a team's folder in a server's data dir) with its own uid, and a gid
equal to it. The ids come from a range that nothing else on a Debian machine hands out,
`TENANT_IDS` (1,900,000,000 up: far above login users, systemd's dynamic users and the
usual /etc/subuid ranges of 65,536 per user), and each is checked when it is handed out:
never 0, never an id that /etc/passwd or /etc/group knows, never inside an /etc/subuid
or /etc/subgid range, never one another tenant holds.

They are not added to /etc/passwd: like OpenShift's arbitrary uids, a sandboxed process
gets USER, LOGNAME and HOME from its environment, and the host's account list stays as
the administrator made it. What remembers them is one machine-wide registry (root's):

    /var/lib/tfkube/tenants.json    {"tenants": {"<team folder>": {"uid": N, "name": ...}}}
    /var/lib/tfkube/tenants.lock    flock held while it is read and written

keyed by the team folder's real path, so two servers on one machine (two data dirs)
never share an id, and a server that restarts finds its teams' ids again. An entry whose
folder no longer exists is released at the next allocation: its files went with it.

`choose_id` decides (pure); `ensure_identity` reads and writes the registry (root only).
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import os
import pwd
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

TENANT_IDS = range(1_900_000_000, 2_000_000_000)
"""Where tenant uids (and gids, equal) come from."""
REGISTRY = Path("/var/lib/tfkube/tenants.json")
SUBID_FILES = (Path("/etc/subuid"), Path("/etc/subgid"))


class TenantError(Exception):
    """No identity could be given (not root, the registry unwritable, the range full)."""


@dataclass(frozen=True)
class TenantIdentity:
    """A team's OS identity: what its workloads run as."""

    name: str
    """The user name its processes see (USER, LOGNAME): `tfkube-<team>`."""
    uid: int
    gid: int


def user_name(team: str) -> str:
    """`tfkube-<team>`, cut to Linux's 32 characters."""
    return f"tfkube-{team}"[:32]


def choose_id(held: Mapping[str, int], taken: Callable[[int], bool], ids: range) -> int:
    """The lowest id in `ids` that no tenant holds and that `taken` does not claim (a
    user, a group, a subordinate range). Pure. Raises TenantError when none is left."""
    held_ids = set(held.values())
    for candidate in ids:
        if candidate == 0 or candidate in held_ids or taken(candidate):
            continue
        return candidate
    raise TenantError(f"every tenant id in {ids.start}-{ids.stop - 1} is in use")


def subid_ranges(text: str) -> list[range]:
    """The ranges of an /etc/subuid or /etc/subgid file (`name:start:count` lines). Pure."""
    found = []
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            start = int(parts[1])
            found.append(range(start, start + int(parts[2])))
    return found


def _system_taken() -> Callable[[int], bool]:
    """Whether the system already uses an id: a user, a group, a subordinate range."""
    ranges: list[range] = []
    for path in SUBID_FILES:
        with contextlib.suppress(OSError):
            ranges += subid_ranges(path.read_text())

    def taken(candidate: int) -> bool:
        for lookup in (pwd.getpwuid, grp.getgrgid):
            try:
                lookup(candidate)
                return True
            except KeyError:
                pass
        return any(candidate in r for r in ranges)

    return taken


@contextlib.contextmanager
def _locked(registry: Path) -> Iterator[None]:
    registry.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    with registry.with_suffix(".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(registry: Path) -> dict[str, tuple[int, str]]:
    """folder -> (uid, team) of every tenant the registry holds."""
    try:
        data = json.loads(registry.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise TenantError(f"cannot read the tenant registry {registry}: {exc}") from None
    tenants = data.get("tenants") if isinstance(data, dict) else None
    found = {}
    for folder, entry in (tenants if isinstance(tenants, dict) else {}).items():
        if isinstance(entry, dict) and isinstance(entry.get("uid"), int):
            found[str(folder)] = (int(entry["uid"]), str(entry.get("team", "")))
    return found


def _write(registry: Path, tenants: Mapping[str, tuple[int, str]]) -> None:
    data = {"tenants": {k: {"uid": uid, "team": team} for k, (uid, team) in tenants.items()}}
    tmp = registry.with_name(f".{registry.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.chmod(0o644)
    tmp.replace(registry)


def ensure_identity(folder: Path, team: str, registry: Path = REGISTRY) -> TenantIdentity:
    """The identity of the tenant whose files live in `folder` (created when it has none
    yet). Root only. Raises TenantError."""
    if os.geteuid() != 0:
        raise TenantError("only root can give a team its own OS identity")
    folder.mkdir(parents=True, exist_ok=True)
    key = str(folder.resolve())
    try:
        with _locked(registry):
            tenants = _read(registry)
            if key in tenants:
                uid = tenants[key][0]
                return TenantIdentity(user_name(team), uid, uid)
            # Release the ids of tenants whose folders are gone (servers removed, tests).
            tenants = {k: v for k, v in tenants.items() if Path(k).is_dir()}
            held = {k: uid for k, (uid, _) in tenants.items()}
            uid = choose_id(held, _system_taken(), TENANT_IDS)
            tenants[key] = (uid, team)
            _write(registry, tenants)
            return TenantIdentity(user_name(team), uid, uid)
    except OSError as exc:
        raise TenantError(f"cannot record team {team}'s identity in {registry}: {exc}") from None


def hand_over(folder: Path, tenant: TenantIdentity, *, recursive: bool = False) -> None:
    """Make `folder` (made if need be) the tenant's own, 0700: its workloads write there,
    other teams cannot even list it, root still reads it. `recursive`: what is inside
    too (owners only; modes are kept). A link is never followed: `folder` must be a real
    folder, in a folder the tenant cannot change. Raises OSError."""
    folder.mkdir(parents=True, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise NotADirectoryError(f"{folder} is not a folder")
    os.chown(folder, tenant.uid, tenant.gid, follow_symlinks=False)
    os.chmod(folder, 0o700)
    if recursive:
        for root, dirs, files in os.walk(folder):
            for name in (*dirs, *files):
                os.chown(os.path.join(root, name), tenant.uid, tenant.gid, follow_symlinks=False)
