"""The local engine's confinement, pure parts: the sandbox's mount plan and command, the
cgroups' layout, files and OOM counts, tenant ids, quantities, and the supervisor's
reading of what a replica left (tests/security runs the real thing)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tfkube.engines.local._cgroups import (
    CgroupLayout,
    Limits,
    cpu_weight,
    detect_layout,
    limits_of,
    oom_kills,
    plan,
)
from tfkube.engines.local._sandbox import (
    Confinement,
    bwrap_options,
    covering,
    passed_environment,
    sandbox_command,
    sees,
)
from tfkube.engines.local._supervisor import oom_message, read_bounded
from tfkube.engines.local._tenants import (
    TenantError,
    choose_id,
    ensure_identity,
    subid_ranges,
    user_name,
)
from tfkube.spec import Resources, cpu_cores, memory_bytes

# -- the mount plan -----------------------------------------------------------------------

DEBIAN = {
    "/usr": "dir",
    "/bin": "link",
    "/sbin": "link",
    "/lib": "link",
    "/lib64": "link",
    "/etc": "dir",
    "/etc/shadow": "file",
    "/etc/ssh": "dir",
    "/etc/resolv.conf": "file",
    "/sys/devices/system/cpu": "dir",
    "/dev/nvidiactl": "dev",
}
LINKS = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}


def conf(**changes: object) -> Confinement:
    base: dict[str, object] = {
        "uid": 1_900_000_000,
        "gid": 1_900_000_000,
        "user": "tfkube-a",
        "cwd": "/data/teams/a/engine/jobs/j/work/worker-0",
        "cgroup": "tfkube-a.0123.worker-0.0",
        "read_only": ("/root/.pyenv/versions/3.11.7", "/srv/tfkube/.venv", "/data/teams/a/data/1"),
        "read_write": ("/data/teams/a/engine/jobs/j/work/worker-0", "/data/teams/a/outputs/1"),
        "hidden": ("/data",),
        "env": (("HOME", "/data/teams/a/engine/jobs/j/work/worker-0"), ("TFKUBE_JOB", "j")),
    }
    base.update(changes)
    return Confinement(**base)  # type: ignore[arg-type]


def options(c: Confinement, host: dict[str, str] | None = None) -> list[str]:
    kinds = DEBIAN if host is None else host
    return bwrap_options(c, kinds.get, lambda p: LINKS.get(p, "/run/elsewhere"))


def triples(opts: list[str], flag: str) -> list[tuple[str, str]]:
    return [(opts[i + 1], opts[i + 2]) for i, o in enumerate(opts) if o == flag]


def singles(opts: list[str], flag: str) -> list[str]:
    return [opts[i + 1] for i, o in enumerate(opts) if o == flag]


def test_system_folders_read_only_and_merged_usr_links() -> None:
    opts = options(conf())
    assert ("/usr", "/usr") in triples(opts, "--ro-bind")
    assert ("/etc", "/etc") in triples(opts, "--ro-bind")
    assert ("usr/bin", "/bin") in triples(opts, "--symlink")
    assert ("usr/lib64", "/lib64") in triples(opts, "--symlink")
    # Absent on this host: neither bound nor linked.
    assert not any("/libx32" in o for o in opts)


def test_secrets_in_etc_are_masked() -> None:
    opts = options(conf())
    assert ("/dev/null", "/etc/shadow") in triples(opts, "--ro-bind")
    assert "/etc/ssh" in singles(opts, "--tmpfs")
    assert "/etc/gshadow" not in opts  # not on this host


def test_private_tmp_proc_dev_and_namespaces() -> None:
    opts = options(conf())
    assert opts[opts.index("/tmp") - 3 : opts.index("/tmp") + 1] == [
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
    ]
    assert "/dev/shm" in singles(opts, "--tmpfs")
    assert singles(opts, "--proc") == ["/proc"]
    assert singles(opts, "--dev") == ["/dev"]
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--new-session"):
        assert flag in opts
    assert "--unshare-net" not in opts  # replicas talk over loopback
    assert "--die-with-parent" in opts
    assert "--die-with-parent" not in options(conf(die_with_parent=False))


def test_own_folders_bound_and_the_data_dir_never() -> None:
    opts = options(conf())
    ro = triples(opts, "--ro-bind")
    rw = triples(opts, "--bind")
    assert ("/data/teams/a/data/1", "/data/teams/a/data/1") in ro
    assert sorted(rw) == [
        ("/data/teams/a/engine/jobs/j/work/worker-0",) * 2,
        ("/data/teams/a/outputs/1",) * 2,
    ]
    sources = [src for src, _ in ro + rw]
    assert "/data" not in sources
    assert "/root" not in sources
    # /data is not below anything bound: it is absent, no mask needed.
    assert "/data" not in singles(opts, "--tmpfs")


def test_a_hidden_folder_below_a_bound_one_is_masked_before_the_own_folders() -> None:
    c = conf(
        read_only=("/srv",),
        hidden=("/srv/tfkube-data",),
        read_write=("/srv/tfkube-data/teams/a/outputs/1",),
    )
    opts = options(c, {**DEBIAN, "/srv/tfkube-data": "dir"})
    assert "/srv/tfkube-data" in singles(opts, "--tmpfs")
    mask = opts.index("/srv/tfkube-data")
    assert opts.index("/srv") < mask < opts.index("/srv/tfkube-data/teams/a/outputs/1")


def test_the_folders_leading_to_mount_points_are_opened() -> None:
    opts = options(conf())
    opened = singles(opts, "--chmod")
    assert opened == ["0755"] * len(opened)
    folders = [opts[i + 2] for i, o in enumerate(opts) if o == "--chmod"]
    assert "/root" in folders
    assert "/root/.pyenv/versions" in folders
    assert "/data/teams/a/engine/jobs/j/work" in folders
    assert "/tmp" not in folders  # its own 1777 tmpfs
    assert "/usr" not in folders
    assert not any(f.startswith("/usr/") for f in folders)
    assert folders.index("/root") < folders.index("/root/.pyenv")  # parents first


def test_environment_is_the_allow_list_only() -> None:
    opts = options(conf())
    assert "--clearenv" in opts
    assert opts.index("--clearenv") < opts.index("--setenv")
    assert triples(opts, "--setenv") == [
        ("HOME", "/data/teams/a/engine/jobs/j/work/worker-0"),
        ("TFKUBE_JOB", "j"),
    ]


def test_gpus_bring_the_control_devices() -> None:
    assert "--dev-bind" not in options(conf())
    opts = options(conf(devices=("/dev/nvidia1",)))
    assert triples(opts, "--dev-bind") == [
        ("/dev/nvidia1", "/dev/nvidia1"),
        ("/dev/nvidiactl", "/dev/nvidiactl"),
    ]


def test_resolv_conf_pointing_into_run_comes_along() -> None:
    opts = options(conf(), {**DEBIAN, "/etc/resolv.conf": "link"})
    assert ("/run/elsewhere", "/run/elsewhere") in triples(opts, "--ro-bind-try")


def test_sandbox_command_joins_cgroups_then_drops_to_the_team() -> None:
    argv = sandbox_command(conf(), ["python", "-m", "x"], ["/cg/a/cgroup.procs"], 7)
    assert argv[:2] == ["/bin/sh", "-c"]
    assert argv[3:7] == ["tfkube-sandbox", "/cg/a/cgroup.procs", "--", "/usr/bin/bwrap"]
    assert argv[7:10] == ["--args", "7", "--"]
    assert "--reuid=1900000000" in argv
    assert "--regid=1900000000" in argv
    assert "--clear-groups" in argv
    assert "--inh-caps=-all" in argv
    assert argv[-5:] == ["/usr/bin/env", "--default-signal=TERM", "python", "-m", "x"]
    assert "TFKUBE_JOB" not in " ".join(argv)  # values travel in the memfd, not argv


def test_sandbox_command_enters_the_jobs_network_namespace_before_bwrap() -> None:
    c = conf(netns=9)
    argv = sandbox_command(c, ["python"], ["/cg/a/cgroup.procs"], 7)
    # As root, after joining the cgroups: bwrap and the team's user never could.
    assert argv[5:9] == ["--", "/usr/bin/nsenter", "--net=/proc/self/fd/9", "--"]
    assert argv[9] == "/usr/bin/bwrap"


@pytest.mark.parametrize(
    ("paths", "already", "expected"),
    [
        pytest.param(["/a/b", "/a", "/a/c/d"], [], ("/a",), id="nested"),
        pytest.param(["/a/b/", "/a/bc"], [], ("/a/b", "/a/bc"), id="prefix-not-parent"),
        pytest.param(["/usr/lib/python3", "/opt/x"], ["/usr"], ("/opt/x",), id="already"),
        pytest.param(["relative", "/x"], [], ("/x",), id="relative-dropped"),
    ],
)
def test_covering(paths: list[str], already: list[str], expected: tuple[str, ...]) -> None:
    assert covering(paths, already) == expected


def test_sees() -> None:
    assert sees("/usr/bin/python3", [])
    assert sees("/srv/venv/bin/x", ["/srv/venv"])
    assert not sees("/srv/venvx/bin/x", ["/srv/venv"])
    assert not sees("/root/train.py", ["/root/.pyenv"])


def test_passed_environment_is_what_the_allow_list_names() -> None:
    environ = {
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        "LC_ALL": "C.UTF-8",
        "HTTPS_PROXY": "http://proxy:3128",
        "TFKUBE_DATABASE_URL": "postgresql://tfkube:secret@db/tfkube",
        "AWS_SECRET_ACCESS_KEY": "x",
        "HOME": "/root",
        "PATH": "/root/bin:/usr/bin",
    }
    names = ("PATH", "SSL_CERT_FILE", "HTTPS_PROXY", "HOME", "TFKUBE_DATABASE_URL")
    assert passed_environment(environ, names) == {
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        "LC_ALL": "C.UTF-8",
        "HTTPS_PROXY": "http://proxy:3128",
    }
    assert passed_environment(environ, ()) == {"LC_ALL": "C.UTF-8"}


# -- cgroups --------------------------------------------------------------------------------

V1_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_SELF = "9:pids:/\n4:memory:/session/abc\n2:cpu,cpuacct:/\n0::/\n"
V2_MOUNTS = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.mark.parametrize(
    ("mountinfo", "self_cgroup", "expected"),
    [
        pytest.param(
            V1_MOUNTS,
            V1_SELF,
            CgroupLayout(
                1,
                (
                    ("memory", "/sys/fs/cgroup/memory/session/abc/tfkube"),
                    ("cpu", "/sys/fs/cgroup/cpu,cpuacct/tfkube"),
                    ("pids", "/sys/fs/cgroup/pids/tfkube"),
                ),
            ),
            id="v1-below-own-cgroup",
        ),
        pytest.param(
            V2_MOUNTS,
            "0::/system.slice/tfkube.service\n",
            CgroupLayout(2, (("", "/sys/fs/cgroup/tfkube"),)),
            id="v2-at-the-root",
        ),
        pytest.param(
            V1_MOUNTS.replace(
                "35 31 0:32 / /sys/fs/cgroup/memory", "35 31 0:32 /docker/c1 /sys/fs/cgroup/memory"
            ),
            "4:memory:/docker/c1/x\n9:pids:/\n2:cpu,cpuacct:/\n",
            CgroupLayout(
                1,
                (
                    ("memory", "/sys/fs/cgroup/memory/x/tfkube"),
                    ("cpu", "/sys/fs/cgroup/cpu,cpuacct/tfkube"),
                    ("pids", "/sys/fs/cgroup/pids/tfkube"),
                ),
            ),
            id="v1-container-root",
        ),
        pytest.param(
            V1_MOUNTS.replace("rw,pids", "rw,freezer"),
            V1_SELF,
            CgroupLayout(2, (("", "/sys/fs/cgroup/unified/tfkube"),)),
            id="v1-without-pids-falls-to-v2",
        ),
        pytest.param("", "", None, id="none"),
    ],
)
def test_detect_layout(mountinfo: str, self_cgroup: str, expected: CgroupLayout | None) -> None:
    assert detect_layout(mountinfo, self_cgroup) == expected


@pytest.mark.parametrize(
    ("limits", "version", "swap", "expected"),
    [
        pytest.param(
            Limits(cpu=1.5, memory=64 * 2**20),
            1,
            True,
            [
                ("memory", "memory.limit_in_bytes", "67108864"),
                ("memory", "memory.memsw.limit_in_bytes", "67108864"),
                ("cpu", "cpu.cfs_period_us", "100000"),
                ("cpu", "cpu.cfs_quota_us", "150000"),
                ("cpu", "cpu.shares", "1536"),
                ("pids", "pids.max", "4096"),
            ],
            id="v1",
        ),
        pytest.param(
            Limits(cpu=0.001, memory=None, pids=None),
            1,
            False,
            [
                ("cpu", "cpu.cfs_period_us", "100000"),
                ("cpu", "cpu.cfs_quota_us", "1000"),
                ("cpu", "cpu.shares", "2"),
            ],
            id="v1-tiny-cpu-no-memory",
        ),
        pytest.param(
            Limits(cpu=2, memory=2**30),
            2,
            False,
            [
                ("memory", "memory.max", "1073741824"),
                ("memory", "memory.swap.max", "0"),
                ("memory", "memory.oom.group", "1"),
                ("cpu", "cpu.max", "200000 100000"),
                ("cpu", "cpu.weight", "79"),
                ("pids", "pids.max", "4096"),
            ],
            id="v2",
        ),
        pytest.param(
            Limits(),
            2,
            False,
            [("memory", "memory.oom.group", "1"), ("pids", "pids.max", "4096")],
            id="v2-no-limits",
        ),
    ],
)
def test_cgroup_plan(
    limits: Limits, version: int, swap: bool, expected: list[tuple[str, str, str]]
) -> None:
    assert plan(limits, version, swap_accounting=swap) == expected


@pytest.mark.parametrize(
    ("cores", "weight"), [(0.001, 1), (0.5, 20), (1, 39), (2, 79), (256, 10000), (1000, 10000)]
)
def test_cpu_weight(cores: float, weight: int) -> None:
    assert cpu_weight(cores) == weight


@pytest.mark.parametrize(
    ("text", "kills"),
    [
        ("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", 2),
        ("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 1\n", 1),
        ("oom_kill_disable 0\nunder_oom 0\n", 0),
        ("", 0),
    ],
)
def test_oom_kills(text: str, kills: int) -> None:
    assert oom_kills(text) == kills


# -- tenants --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("held", "taken", "ids", "expected"),
    [
        pytest.param({}, set(), range(10, 20), 10, id="first"),
        pytest.param({"/a": 10, "/b": 11}, set(), range(10, 20), 12, id="held-skipped"),
        pytest.param({"/a": 10}, {11, 12}, range(10, 20), 13, id="system-ids-skipped"),
        pytest.param({}, set(), range(0, 3), 1, id="never-root"),
    ],
)
def test_choose_id(held: dict[str, int], taken: set[int], ids: range, expected: int) -> None:
    assert choose_id(held, taken.__contains__, ids) == expected


def test_choose_id_when_the_range_is_full() -> None:
    with pytest.raises(TenantError, match="in use"):
        choose_id({"/a": 5}, {6}.__contains__, range(5, 7))


def test_subid_ranges() -> None:
    text = "alice:100000:65536\nbroken\nbob:165536:65536\n"
    assert subid_ranges(text) == [range(100000, 165536), range(165536, 231072)]


def test_user_name() -> None:
    assert user_name("ml") == "tfkube-ml"
    assert len(user_name("a" * 40)) == 32


@pytest.mark.skipif(os.geteuid() != 0, reason="tenant ids are given by root only")
def test_ensure_tenant_is_stable_and_releases_removed_folders(tmp_path: Path) -> None:
    registry = tmp_path / "state" / "tenants.json"
    a, b = tmp_path / "teams" / "a", tmp_path / "teams" / "b"
    first = ensure_identity(a, "a", registry)
    assert ensure_identity(a, "a", registry) == first  # a restart finds it again
    second = ensure_identity(b, "b", registry)
    assert second.uid != first.uid
    assert second.uid == second.gid
    assert first.uid >= 1_900_000_000
    assert first.name == "tfkube-a"
    a.rmdir()
    third = ensure_identity(tmp_path / "teams" / "c", "c", registry)
    assert third.uid == first.uid  # a's folder is gone: its id is free again
    saved = json.loads(registry.read_text())["tenants"]
    assert sorted(saved) == sorted(str(p.resolve()) for p in (b, tmp_path / "teams" / "c"))


# -- quantities and the supervisor's reading ------------------------------------------------


@pytest.mark.parametrize(
    ("quantity", "cores"), [("2", 2.0), ("500m", 0.5), ("1.5", 1.5), ("100m", 0.1)]
)
def test_cpu_cores(quantity: str, cores: float) -> None:
    assert cpu_cores(quantity) == pytest.approx(cores)


@pytest.mark.parametrize(
    ("quantity", "size"),
    [("64Mi", 64 * 2**20), ("1G", 10**9), ("1.5Gi", 3 * 2**29), ("100", 100), ("1500m", 2)],
)
def test_memory_bytes(quantity: str, size: int) -> None:
    assert memory_bytes(quantity) == size


def test_a_quantity_that_is_none() -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        memory_bytes("4GB")


def test_limits_and_oom_message_from_resources() -> None:
    assert limits_of(Resources(cpu="500m", memory="1Gi")) == Limits(cpu=0.5, memory=2**30)
    assert limits_of(Resources()) == Limits()
    assert limits_of(Resources(cpu="0", memory="0")) == Limits()
    assert oom_message(Resources(memory="64Mi")).startswith("OOMKilled: ")


def test_read_bounded_refuses_links_and_fifos(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_text("x" * 10_000)
    assert read_bounded(real, 100) == "x" * 100
    link = tmp_path / "link"
    link.symlink_to(real)
    assert read_bounded(link) is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_bounded(fifo) is None  # and it did not wait for a writer
    assert read_bounded(tmp_path / "missing") is None
