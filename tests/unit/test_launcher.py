"""The launcher's pure parts: the TFKUBE_* contract, and fetching code safely.

Fetching uses real .tar.gz files in tmp_path, file:// URLs, and only loopback HTTP.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import socket
import stat
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfkube.launcher import (
    ContractError,
    FetchError,
    ReplicaContract,
    contract_from_env,
    fetch_code,
    sha256_file,
)
from tfkube.launcher._fetch import download, unpack
from tfkube.tfcluster import classic_flags, tf_config

CLUSTER = {"ps": ["h:1"], "worker": ["h:2", "h:3"]}
CHIEF_CLUSTER = {"chief": ["h:0"], **CLUSTER}


def contract_env(**changes: str | None) -> dict[str, str]:
    """A complete contract environment; a value of None removes the variable."""
    env = {
        "TFKUBE_JOB": "mnist",
        "TFKUBE_ROLE": "worker",
        "TFKUBE_INDEX": "1",
        "TFKUBE_CLUSTER": json.dumps(CLUSTER),
        "TFKUBE_NUM_PS": "1",
        "TFKUBE_NUM_WORKERS": "2",
        "TFKUBE_DATA_DIR": "/data",
        "TFKUBE_LOG_DIR": "/logs",
        "TFKUBE_CODE_URL": "file:///code.tar.gz",
        "TFKUBE_CODE_SHA256": "ab" * 32,
        "TFKUBE_ENTRYPOINT": "train.py",
        "TFKUBE_WORK_DIR": "/work",
        "TFKUBE_ARGS": json.dumps(["--epochs=2", "--lr", "0.1"]),
        "TFKUBE_ENV_COMMANDS": json.dumps({"CLASSPATH": "hadoop classpath"}),
    }
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def contract(role: str = "worker", index: int = 0, cluster=None, args=()) -> ReplicaContract:
    return ReplicaContract(
        job="j",
        role=role,
        index=index,
        cluster=CLUSTER if cluster is None else cluster,
        code_url="file:///c.tar.gz",
        code_sha256=None,
        entrypoint="run.sh",
        work_dir="/work",
        data_dir="/data",
        log_dir="/logs/j",
        args=tuple(args),
        env_commands={},
    )


# -- contract_from_env ------------------------------------------------------------------


def test_contract_from_env_reads_everything():
    assert contract_from_env(contract_env()) == ReplicaContract(
        job="mnist",
        role="worker",
        index=1,
        cluster=CLUSTER,
        code_url="file:///code.tar.gz",
        code_sha256="ab" * 32,
        entrypoint="train.py",
        work_dir="/work",
        data_dir="/data",
        log_dir="/logs",
        args=("--epochs=2", "--lr", "0.1"),
        env_commands={"CLASSPATH": "hadoop classpath"},
    )


def test_contract_from_env_defaults():
    env = contract_env(
        TFKUBE_CODE_SHA256="",
        TFKUBE_ENTRYPOINT=None,
        TFKUBE_DATA_DIR=None,
        TFKUBE_LOG_DIR=None,
        TFKUBE_ARGS=None,
        TFKUBE_ENV_COMMANDS="",
    )
    c = contract_from_env(env)
    assert c.code_sha256 is None
    assert c.entrypoint == "run.sh"
    assert c.data_dir == ""
    assert c.log_dir == ""
    assert c.args == ()
    assert c.env_commands == {}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("TFKUBE_JOB", id="job"),
        pytest.param("TFKUBE_ROLE", id="role"),
        pytest.param("TFKUBE_CLUSTER", id="cluster"),
        pytest.param("TFKUBE_WORK_DIR", id="work-dir"),
    ],
)
@pytest.mark.parametrize("value", [pytest.param(None, id="unset"), pytest.param("", id="empty")])
def test_contract_from_env_missing_variable(name, value):
    with pytest.raises(ContractError, match=f"^{name} is not set; the engine must set it"):
        contract_from_env(contract_env(**{name: value}))


@pytest.mark.parametrize("value", [pytest.param(None, id="unset"), pytest.param("", id="empty")])
def test_contract_needs_code_or_a_command(value):
    with pytest.raises(ContractError, match="TFKUBE_CODE_URL or TFKUBE_COMMAND must be set"):
        contract_from_env(contract_env(TFKUBE_CODE_URL=value))


@pytest.mark.parametrize(
    ("command", "code_url", "args", "expected"),
    [
        pytest.param(
            '["python", "/opt/train.py"]',
            None,
            '["--steps=3"]',
            ["python", "/opt/train.py", "--steps=3"],
            id="image-command-no-flags",
        ),
        pytest.param(
            '["sh", "-c", "echo $TF_CONFIG"]',
            "file:///tmp/code.tar.gz",
            None,
            ["sh", "-c", "echo $TF_CONFIG"],
            id="command-with-code",
        ),
    ],
)
def test_a_command_runs_as_given(command, code_url, args, expected):
    c = contract_from_env(
        contract_env(TFKUBE_COMMAND=command, TFKUBE_CODE_URL=code_url, TFKUBE_ARGS=args)
    )
    assert c.code_url == code_url
    assert c.argv(None) == expected  # no classic flags: those are for tfkube's run.sh


@pytest.mark.parametrize(
    "command",
    [
        pytest.param("[]", id="empty"),
        pytest.param('"python train.py"', id="string"),
        pytest.param("[1, 2]", id="numbers"),
    ],
)
def test_a_malformed_command_is_a_contract_error(command):
    with pytest.raises(ContractError, match="TFKUBE_COMMAND must be a non-empty JSON list"):
        contract_from_env(contract_env(TFKUBE_COMMAND=command))


@pytest.mark.parametrize(
    ("argv", "path", "expected"),
    [
        pytest.param(["python", "t.py"], "/nonexistent", [sys.executable, "t.py"], id="python"),
        pytest.param(["python3", "-u"], "", [sys.executable, "-u"], id="python3-empty-path"),
        pytest.param(["sh", "-c", "x"], "/nonexistent", ["sh", "-c", "x"], id="other-as-given"),
        pytest.param(["python3", "t.py"], None, None, id="python3-on-path-kept"),
    ],
)
def test_python_missing_from_path_is_the_launchers_interpreter(argv, path, expected):
    from tfkube.launcher._run import resolve_program

    env = {} if path is None else {"PATH": path}
    if path is None:
        env["PATH"] = str(Path(sys.executable).parent)
        expected = argv
    assert resolve_program(argv, env) == expected


@pytest.mark.parametrize(
    ("tfkube_index", "completion_index", "expected"),
    [
        pytest.param("1", None, 1, id="tfkube-index"),
        pytest.param(None, "1", 1, id="job-completion-index-fallback"),
        pytest.param("", "0", 0, id="empty-tfkube-index-falls-back"),
        pytest.param("0", "1", 0, id="tfkube-index-wins"),
        pytest.param("01", None, 1, id="leading-zero"),
    ],
)
def test_contract_from_env_index(tfkube_index, completion_index, expected):
    env = contract_env(TFKUBE_INDEX=tfkube_index, JOB_COMPLETION_INDEX=completion_index)
    assert contract_from_env(env).index == expected


@pytest.mark.parametrize(
    ("tfkube_index", "completion_index"),
    [
        pytest.param(None, None, id="neither"),
        pytest.param("", "", id="both-empty"),
        pytest.param("-1", None, id="negative"),
        pytest.param("1.0", None, id="decimal"),
        pytest.param("one", None, id="word"),
        pytest.param(" 1", None, id="space"),
        pytest.param("\u00b2", None, id="superscript-digit"),
        pytest.param(None, "x", id="bad-completion-index"),
    ],
)
def test_contract_from_env_bad_index(tfkube_index, completion_index):
    env = contract_env(TFKUBE_INDEX=tfkube_index, JOB_COMPLETION_INDEX=completion_index)
    with pytest.raises(ContractError, match=r"TFKUBE_INDEX \(or JOB_COMPLETION_INDEX\)"):
        contract_from_env(env)


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        pytest.param("TFKUBE_CLUSTER", "{", "malformed", id="cluster-truncated"),
        pytest.param("TFKUBE_CLUSTER", "ps=h:1", "malformed", id="cluster-not-json"),
        pytest.param("TFKUBE_ARGS", "[--lr]", "malformed", id="args-not-json"),
        pytest.param("TFKUBE_ENV_COMMANDS", "{'A': 'b'}", "malformed", id="commands-quotes"),
        pytest.param("TFKUBE_CLUSTER", "[]", "TFKUBE_CLUSTER must be", id="cluster-list"),
        pytest.param(
            "TFKUBE_CLUSTER", '{"worker": "h:2"}', "TFKUBE_CLUSTER must be", id="cluster-str"
        ),
        pytest.param("TFKUBE_ARGS", '"--lr=0.1"', "TFKUBE_ARGS must be", id="args-string"),
        pytest.param("TFKUBE_ARGS", '{"a": 1}', "TFKUBE_ARGS must be", id="args-object"),
        pytest.param(
            "TFKUBE_ENV_COMMANDS", '["date"]', "TFKUBE_ENV_COMMANDS must be", id="commands-list"
        ),
        pytest.param("TFKUBE_ROLE", "master", "unknown role 'master'", id="unknown-role"),
        pytest.param("TFKUBE_INDEX", "2", "worker index 2 is outside", id="index-past-end"),
        pytest.param("TFKUBE_ROLE", "chief", "chief index 1 is outside", id="role-absent"),
    ],
)
def test_contract_from_env_malformed(name, value, match):
    with pytest.raises(ContractError, match=match):
        contract_from_env(contract_env(**{name: value}))


RULE = "j-{role}-{index}.j:2222"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param(
            {},
            {"ps": ["j-ps-0.j:2222"], "worker": ["j-worker-0.j:2222", "j-worker-1.j:2222"]},
            id="ps-and-workers",
        ),
        pytest.param(
            {"TFKUBE_HAS_CHIEF": "1", "TFKUBE_NUM_PS": "0"},
            {"chief": ["j-chief-0.j:2222"], "worker": ["j-worker-0.j:2222", "j-worker-1.j:2222"]},
            id="chief-no-ps",
        ),
        pytest.param(
            {"TFKUBE_CLUSTER": json.dumps({"ps": ["other:1"], "worker": ["a:1", "b:1"]})},
            {"ps": ["j-ps-0.j:2222"], "worker": ["j-worker-0.j:2222", "j-worker-1.j:2222"]},
            id="the-rule-wins",
        ),
    ],
)
def test_contract_from_env_address_rule(changes, expected):
    """A pod carries a rule and the counts, not every address (its size would grow with
    the job's); the launcher expands it."""
    env = contract_env(TFKUBE_CLUSTER=None, TFKUBE_ADDRESS=RULE, JOB_COMPLETION_INDEX="1")
    env.pop("TFKUBE_INDEX")
    env.update(changes)
    assert contract_from_env(env).cluster == expected


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        pytest.param(
            "TFKUBE_ADDRESS", "j-{role}.j:1", "TFKUBE_ADDRESS: an address rule", id="rule"
        ),
        pytest.param("TFKUBE_NUM_WORKERS", "two", "TFKUBE_NUM_WORKERS must be", id="count"),
        pytest.param("TFKUBE_NUM_WORKERS", "1", "worker index 1 is outside", id="index-past-end"),
    ],
)
def test_contract_from_env_bad_address_rule(name, value, match):
    env = contract_env(TFKUBE_CLUSTER=None, TFKUBE_ADDRESS=RULE)
    with pytest.raises(ContractError, match=match):
        contract_from_env({**env, name: value})


def test_contract_from_env_sharded_rule_and_offset():
    """A pod of a role's later Indexed Job (`<job>-worker-s1`): its index is its Job's
    offset plus JOB_COMPLETION_INDEX, and the sharded rule gives every replica its Job's
    hostname; the pod's env stays a rule and two numbers."""
    env = contract_env(
        TFKUBE_CLUSTER=None,
        TFKUBE_INDEX=None,
        TFKUBE_ADDRESS="j-{role}{shard:3}-{index}.j:2222",
        TFKUBE_NUM_WORKERS="5",
        JOB_COMPLETION_INDEX="1",
        TFKUBE_INDEX_OFFSET="3",
    )
    c = contract_from_env(env)
    assert c.index == 4
    assert c.cluster == {
        "ps": ["j-ps-0.j:2222"],
        "worker": [
            "j-worker-0.j:2222",
            "j-worker-1.j:2222",
            "j-worker-2.j:2222",
            "j-worker-s1-0.j:2222",
            "j-worker-s1-1.j:2222",
        ],
    }
    assert json.loads(c.environment({})["TF_CONFIG"])["task"] == {"type": "worker", "index": 4}


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        pytest.param({"TFKUBE_INDEX_OFFSET": "-3"}, "TFKUBE_INDEX_OFFSET must be", id="sign"),
        pytest.param({"TFKUBE_INDEX_OFFSET": "3"}, "worker index 4 is outside", id="past-end"),
    ],
)
def test_contract_from_env_bad_offset(changes, match):
    env = contract_env(TFKUBE_CLUSTER=None, TFKUBE_INDEX=None, TFKUBE_ADDRESS=RULE)
    with pytest.raises(ContractError, match=match):
        contract_from_env({**env, "JOB_COMPLETION_INDEX": "1", **changes})


def test_contract_from_env_local_index_ignores_an_offset():
    """TFKUBE_INDEX (the local engine's) is the replica's index as it stands."""
    c = contract_from_env(contract_env(TFKUBE_INDEX_OFFSET="3"))
    assert c.index == 1


def test_contract_from_env_evaluator_is_outside_the_cluster():
    c = contract_from_env(contract_env(TFKUBE_ROLE="evaluator", TFKUBE_INDEX="0"))
    assert c.role == "evaluator"
    assert json.loads(c.environment({})["TF_CONFIG"])["task"] == {"type": "evaluator", "index": 0}


def test_contract_from_env_stringifies_args_and_commands():
    env = contract_env(TFKUBE_ARGS="[3, 0.5]", TFKUBE_ENV_COMMANDS='{"N": 7}')
    c = contract_from_env(env)
    assert c.args == ("3", "0.5")
    assert c.env_commands == {"N": "7"}


# -- ReplicaContract.environment --------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "index", "cluster", "shard"),
    [
        pytest.param("worker", 0, CLUSTER, ("0", "2"), id="worker-0"),
        pytest.param("worker", 1, CLUSTER, ("1", "2"), id="worker-1"),
        pytest.param("ps", 0, CLUSTER, None, id="ps"),
        pytest.param("chief", 0, CHIEF_CLUSTER, None, id="chief"),
        pytest.param("evaluator", 0, CLUSTER, None, id="evaluator"),
    ],
)
def test_environment(role, index, cluster, shard):
    base = {"PATH": "/bin", "TF_CONFIG": "stale", "TFKUBE_SHARD_INDEX": "9"}
    original = dict(base)
    env = contract(role, index, cluster).environment(base)
    assert base == original  # not changed in place
    assert env["PATH"] == "/bin"
    assert env["TF_CONFIG"] == tf_config(cluster, role, index)
    assert json.loads(env["TF_CONFIG"])["task"] == {"type": role, "index": index}
    assert env["TFKUBE_INDEX"] == str(index)
    assert env["TFKUBE_CHECKPOINT_DIR"] == "/logs/j"
    assert env["TFKUBE_EXPORT_DIR"] == "/logs/j/export"  # the export convention
    if shard is None:
        assert env["TFKUBE_SHARD_INDEX"] == "9"  # the base's, untouched
        assert "TFKUBE_NUM_SHARDS" not in env
    else:
        assert (env["TFKUBE_SHARD_INDEX"], env["TFKUBE_NUM_SHARDS"]) == shard


def test_environment_shards_only_for_workers():
    for role, index in (("ps", 0), ("evaluator", 0)):
        env = contract(role, index).environment({})
        assert "TFKUBE_SHARD_INDEX" not in env
        assert "TFKUBE_NUM_SHARDS" not in env


# -- ReplicaContract.argv ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "executable", "head"),
    [
        pytest.param("run.sh", True, [], id="executable-sh"),
        pytest.param("train.py", True, [], id="executable-py"),
        pytest.param("train", True, [], id="executable-no-extension"),
        pytest.param("run.sh", False, ["bash"], id="sh-via-bash"),
        pytest.param("train.py", False, ["python3"], id="py-via-python3"),
        pytest.param("train", False, ["bash"], id="no-extension-via-bash"),
    ],
)
@pytest.mark.parametrize(
    ("role", "index", "cluster"),
    [
        pytest.param("worker", 1, CLUSTER, id="worker-no-chief"),
        pytest.param("chief", 0, CHIEF_CLUSTER, id="chief"),
    ],
)
def test_argv(tmp_path, name, executable, head, role, index, cluster):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755 if executable else 0o644)
    args = ["--epochs=2", "--lr", "0.1"]
    argv = contract(role, index, cluster, args).argv(str(path))
    flags = classic_flags(cluster, role, index)
    assert argv == [*head, str(path), *flags, *args]
    assert ("--chief_hosts=h:0" in argv) is (role == "chief")


def test_argv_flags_without_args(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("")
    assert contract("ps", 0).argv(str(path)) == [
        "bash",
        str(path),
        "--ps_hosts=h:1",
        "--worker_hosts=h:2,h:3",
        "--job_name=ps",
        "--task_index=0",
    ]


# -- archives ---------------------------------------------------------------------------


def make_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


def file_(name: str, data: bytes = b"data", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    if kind == tarfile.DIRTYPE:
        info.mode = 0o755
    return info, b""


def good_code(path: Path) -> Path:
    return make_tar(
        path,
        [
            special("bin", tarfile.DIRTYPE),
            file_("run.sh", b"#!/bin/sh\necho hi\n", 0o755),
            file_("bin/train.py", b"print('train')\n"),
            special("latest", tarfile.SYMTYPE, "bin/train.py"),
        ],
    )


UNSAFE_MEMBERS = [
    pytest.param([file_("../evil")], id="dotdot"),
    pytest.param([file_("sub/../../evil")], id="inner-dotdot"),
    pytest.param([special("link", tarfile.SYMTYPE, "../evil")], id="symlink-escapes"),
    pytest.param(
        [special("d", tarfile.DIRTYPE), special("d/up", tarfile.SYMTYPE, "../../evil")],
        id="nested-symlink-escapes",
    ),
    pytest.param([special("link", tarfile.SYMTYPE, "/etc/passwd")], id="symlink-absolute"),
    pytest.param([special("link", tarfile.LNKTYPE, "../evil")], id="hardlink-escapes"),
    pytest.param([special("fifo", tarfile.FIFOTYPE)], id="fifo"),
    pytest.param([special("null", tarfile.CHRTYPE)], id="char-device"),
    pytest.param([special("disk", tarfile.BLKTYPE)], id="block-device"),
]
"""Members tarfile's `data` filter refuses; `_data_member` must refuse them as well."""
FILTERS = [
    pytest.param(
        True,
        id="data-filter",
        marks=pytest.mark.skipif(
            not hasattr(tarfile, "data_filter"), reason="this Python's tarfile has no data filter"
        ),
    ),
    pytest.param(False, id="own-checks"),  # Python < 3.11.4, e.g. Debian 12 in an image
]


def test_sha256_file(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc" * 1000)
    assert sha256_file(path) == hashlib.sha256(b"abc" * 1000).hexdigest()


@pytest.mark.parametrize("builtin_filter", FILTERS)
def test_unpack_good_archive(tmp_path, builtin_filter):
    dest = tmp_path / "out" / "code"
    unpack(good_code(tmp_path / "c.tar.gz"), dest, builtin_filter=builtin_filter)
    assert (dest / "run.sh").read_text() == "#!/bin/sh\necho hi\n"
    assert os.access(dest / "run.sh", os.X_OK)
    assert (dest / "bin" / "train.py").read_text() == "print('train')\n"
    assert (dest / "latest").is_symlink()
    assert (dest / "latest").read_text() == "print('train')\n"


@pytest.mark.parametrize("builtin_filter", FILTERS)
@pytest.mark.parametrize("members", UNSAFE_MEMBERS)
def test_unpack_refuses_unsafe_members(tmp_path, members, builtin_filter):
    (tmp_path / "evil").write_text("precious")  # what an escaping member would target
    archive = make_tar(tmp_path / "c.tar.gz", [file_("ok.txt"), *members])
    with pytest.raises(FetchError, match="cannot unpack the code") as info:
        unpack(archive, tmp_path / "a" / "b" / "code", builtin_filter=builtin_filter)
    assert info.value.permanent
    assert (tmp_path / "evil").read_text() == "precious"
    # Refused from the headers alone: not even the destination was created.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tar.gz", "evil"]


@pytest.mark.parametrize("builtin_filter", FILTERS)
def test_unpack_refuses_absolute_members(tmp_path, builtin_filter):
    target = tmp_path / "outside" / "evil"
    archive = make_tar(tmp_path / "c.tar.gz", [file_(str(target))])
    with pytest.raises(FetchError, match="has an absolute path") as info:
        unpack(archive, tmp_path / "code", builtin_filter=builtin_filter)
    assert info.value.permanent
    assert not target.exists()
    assert not (tmp_path / "code").exists()


@pytest.mark.parametrize("builtin_filter", FILTERS)
def test_unpack_drops_unsafe_modes(tmp_path, builtin_filter):
    archive = make_tar(tmp_path / "c.tar.gz", [file_("setuid", b"x", 0o4777)])
    unpack(archive, tmp_path / "code", builtin_filter=builtin_filter)
    mode = (tmp_path / "code" / "setuid").stat().st_mode
    assert not mode & (stat.S_ISUID | stat.S_IWOTH)


@pytest.mark.parametrize(
    ("sizes", "max_bytes", "ok"),
    [
        pytest.param([10, 10], 20, True, id="exactly-the-limit"),
        pytest.param([10, 11], 20, False, id="one-byte-over"),
        pytest.param([1000], 999, False, id="one-big-file"),
        pytest.param([0, 0, 0], 0, True, id="empty-files"),
    ],
)
def test_unpack_size_limit(tmp_path, sizes, max_bytes, ok):
    members = [file_(f"f{i}", b"x" * n) for i, n in enumerate(sizes)]
    archive = make_tar(tmp_path / "c.tar.gz", members)
    dest = tmp_path / "code"
    if ok:
        unpack(archive, dest, max_bytes=max_bytes)
        assert len(list(dest.iterdir())) == len(sizes)
    else:
        with pytest.raises(FetchError, match=f"the limit is {max_bytes}") as info:
            unpack(archive, dest, max_bytes=max_bytes)
        assert info.value.permanent
        assert not dest.exists()  # refused before anything was written


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"not an archive at all", id="garbage"),
        pytest.param(b"", id="empty"),
        pytest.param(None, id="truncated-gzip"),
    ],
)
def test_unpack_corrupt_archive(tmp_path, content):
    archive = tmp_path / "c.tar.gz"
    if content is None:
        good_code(archive)
        content = archive.read_bytes()[:100]
    archive.write_bytes(content)
    with pytest.raises(FetchError, match="cannot unpack the code") as info:
        unpack(archive, tmp_path / "code")
    assert info.value.permanent


def test_unpack_refuses_existing_destination(tmp_path):
    dest = tmp_path / "code"
    dest.mkdir()
    with pytest.raises(FetchError) as info:
        unpack(good_code(tmp_path / "c.tar.gz"), dest)
    assert info.value.permanent


# -- download ---------------------------------------------------------------------------


def closed_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(base URL, folder) of an HTTP server on 127.0.0.1 serving that folder."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_download_file_url(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"payload" * 100)
    dest = tmp_path / "dest.bin"
    digest = download(src.as_uri(), dest)
    assert digest == hashlib.sha256(b"payload" * 100).hexdigest()
    assert dest.read_bytes() == b"payload" * 100
    assert not (tmp_path / "dest.bin.part").exists()


def test_download_http_loopback(http_root):
    url, root = http_root
    (root / "code.tar.gz").write_bytes(b"x" * 5000)
    dest = root.parent / "got"
    assert download(f"{url}/code.tar.gz", dest) == hashlib.sha256(b"x" * 5000).hexdigest()
    assert dest.read_bytes() == b"x" * 5000


@pytest.mark.parametrize(
    ("size", "max_bytes", "ok"),
    [
        pytest.param(100, 100, True, id="exactly-the-limit"),
        pytest.param(101, 100, False, id="one-byte-over"),
        pytest.param(10_000, 10, False, id="far-over"),
    ],
)
def test_download_size_limit(tmp_path, size, max_bytes, ok):
    src = tmp_path / "src.bin"
    src.write_bytes(b"z" * size)
    dest = tmp_path / "dest.bin"
    if ok:
        download(src.as_uri(), dest, max_bytes=max_bytes)
        assert dest.stat().st_size == size
    else:
        with pytest.raises(FetchError, match=f"larger than the {max_bytes} byte limit") as info:
            download(src.as_uri(), dest, max_bytes=max_bytes)
        assert info.value.permanent
        assert not dest.exists()
        assert not (tmp_path / "dest.bin.part").exists()


def test_download_size_limit_over_http(http_root):
    url, root = http_root
    (root / "big").write_bytes(b"z" * 2000)
    dest = root.parent / "got"
    with pytest.raises(FetchError, match="larger than the 1000 byte limit") as info:
        download(f"{url}/big", dest, max_bytes=1000)
    assert info.value.permanent
    assert not dest.exists()


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("ftp://127.0.0.1/code.tar.gz", id="ftp"),
        pytest.param("s3://bucket/code.tar.gz", id="s3"),
        pytest.param("code.tar.gz", id="no-scheme"),
        pytest.param("/abs/code.tar.gz", id="bare-path"),
        pytest.param("data:,hello", id="data"),
    ],
)
def test_download_unsupported_scheme(tmp_path, url):
    with pytest.raises(FetchError, match="unsupported code URL scheme") as info:
        download(url, tmp_path / "dest")
    assert info.value.permanent
    assert list(tmp_path.iterdir()) == []


def test_download_missing_file_is_permanent(tmp_path):
    with pytest.raises(FetchError, match="cannot read") as info:
        download((tmp_path / "missing.tar.gz").as_uri(), tmp_path / "dest")
    assert info.value.permanent
    assert list(tmp_path.iterdir()) == []


def test_download_unreachable_server_is_retryable(tmp_path):
    url = f"http://127.0.0.1:{closed_loopback_port()}/code.tar.gz"
    with pytest.raises(FetchError, match="cannot download") as info:
        download(url, tmp_path / "dest", timeout=5)
    assert not info.value.permanent
    assert list(tmp_path.iterdir()) == []


# -- fetch_code -------------------------------------------------------------------------


def test_fetch_code_happy_path(tmp_path):
    archive = good_code(tmp_path / "c.tar.gz")
    work = tmp_path / "work" / "worker-0"
    code = fetch_code(archive.as_uri(), sha256_file(archive), work)
    assert code == work / "code"
    assert (code / "run.sh").is_file()
    assert (code / "bin" / "train.py").read_text() == "print('train')\n"
    assert not (work / "code.tar.gz").exists()  # the archive is not kept


def test_fetch_code_without_checksum(tmp_path):
    archive = good_code(tmp_path / "c.tar.gz")
    code = fetch_code(archive.as_uri(), None, tmp_path / "work")
    assert (code / "run.sh").is_file()


def test_fetch_code_over_http(http_root):
    url, root = http_root
    archive = good_code(root / "c.tar.gz")
    code = fetch_code(f"{url}/c.tar.gz", sha256_file(archive), root.parent / "work")
    assert (code / "run.sh").is_file()


def test_fetch_code_replaces_previous_code(tmp_path):
    work = tmp_path / "work"
    stale = work / "code" / "stale.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    archive = good_code(tmp_path / "c.tar.gz")
    code = fetch_code(archive.as_uri(), None, work)
    assert not stale.exists()
    assert (code / "run.sh").is_file()


def test_fetch_code_checksum_mismatch_is_permanent(tmp_path):
    archive = good_code(tmp_path / "c.tar.gz")
    actual = sha256_file(archive)
    wrong = "0" * 64
    work = tmp_path / "work"
    with pytest.raises(FetchError) as info:
        fetch_code(archive.as_uri(), wrong, work)
    assert info.value.permanent
    assert f"SHA-256 {actual}, expected {wrong}" in str(info.value)
    assert not (work / "code.tar.gz").exists()
    assert not (work / "code").exists()


def test_fetch_code_unsafe_archive_is_permanent(tmp_path):
    archive = make_tar(tmp_path / "c.tar.gz", [file_("../escape")])
    with pytest.raises(FetchError, match="outside the destination") as info:
        fetch_code(archive.as_uri(), sha256_file(archive), tmp_path / "work")
    assert info.value.permanent
    assert not (tmp_path / "escape").exists()


def test_fetch_code_unreachable_is_retryable(tmp_path):
    url = f"http://127.0.0.1:{closed_loopback_port()}/c.tar.gz"
    with pytest.raises(FetchError) as info:
        fetch_code(url, None, tmp_path / "work")
    assert not info.value.permanent
