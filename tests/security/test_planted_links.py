"""The server never follows what a workload made (issue 17, item 3).

A real `tfkube server` (local engine, SQLite) with two teams. Team B's job writes what an
attacker wants: a log, a secret output, TensorBoard scalars, a progress hint, an export.
Team A's jobs (a shell `run.sh`, no TensorFlow) plant symbolic links and hard links (where
their confinement lets them) in their own output and log folders, a FIFO where a log is
read, and point the launcher's termination message at /etc/passwd; a job's whole output
folder is replaced by a link (as a pod with the team's claim mounted whole could). Every
read the server makes on A's behalf (log list and text, outputs listing and download, a
folder as .tar.gz, the checkpoint and its download, scalars, progress, the exported
versions, the replica's message) must show none of it: not B's data, not the server's
database, not /etc/passwd, and the server must not hang on the FIFO.
"""

from __future__ import annotations

import io
import shutil
import struct
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from server._server import Api, ServerProc, api_for
from server.conftest import start_server, stop_server, targz, upload, wait_job

PASSWD = "root:x:0:0"
SQLITE = b"SQLite format 3"
B_LOG = "team-b-log-line"
B_SECRET = "team-b-secret-output"
B_TAG = "team_b_secret_scalar"


def _event_file(tag: str) -> bytes:
    """A TensorBoard event file (TFRecord of Event protos) with one scalar."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    out = b""
    for step in (1, 2):
        event = Event(wall_time=time.time(), step=step)
        event.summary.value.append(Summary.Value(tag=tag, simple_value=0.5 * step))
        data = event.SerializeToString()
        length = struct.pack("<Q", len(data))
        out += length + struct.pack("<I", masked_crc32c(length))
        out += data + struct.pack("<I", masked_crc32c(data))
    return out


VICTIM = f"""#!/bin/sh
set -e
out="$TFKUBE_LOG_DIR"
echo {B_LOG}
echo {B_SECRET} > "$out/secret.txt"
echo '{{"step": 77, "total": 777}}' > "$out/progress.json"
mkdir -p "$out/export/5" "$out/run"
echo model > "$out/export/5/saved_model.pb"
cp events.bin "$out/run/events.out.tfevents.1.victim"
"""


def attacker(victim_out: Path, database: Path, engine_log: Path, decoy: Path) -> str:
    """A's run.sh: links and hard links to B's outputs, the database and /etc/passwd.
    It exits 0: a restart's launcher would write its log through a planted name. The
    engine's own log of the replica (which the supervisor appends to at a start) becomes
    a link to a decoy of the test's, never to a file that matters."""
    return f"""#!/bin/sh
out="$TFKUBE_LOG_DIR"
logs="$out/.tfkube/logs"
mkdir -p "$logs/worker-0" "$out/ckpt" "$out/run"
ln -s /etc/passwd "$logs/worker-0/91.log"
ln -s {database} "$logs/worker-0/92.log"
ln {database} "$logs/worker-0/93.log"
mkfifo "$logs/worker-0/94.log"
ln -s {victim_out}/.tfkube/logs/worker-0 "$logs/chief-0"
ln -s /etc "$out/etc"
ln -s {victim_out} "$out/victim"
ln {database} "$out/database.bin"
ln -s /etc/passwd "$out/passwd.txt"
ln -s {victim_out}/progress.json "$out/progress.json"
mkdir -p "$out/export"
ln -s {victim_out}/export/5 "$out/export/9"
ln -s {victim_out}/run/events.out.tfevents.1.victim "$out/run/events.out.tfevents.2.x"
printf 'model_checkpoint_path: "model.ckpt-1"\\n' > "$out/ckpt/checkpoint"
echo index > "$out/ckpt/model.ckpt-1.index"
ln {database} "$out/ckpt/model.ckpt-1.data-00000-of-00001"
ln -s /etc/passwd "$TFKUBE_TERMINATION_LOG" 2>/dev/null || true
echo planted
ln -sf {decoy} {engine_log} 2>/dev/null  # a confined job cannot reach it
exit 0
"""


class World:
    def __init__(self, server: ServerProc, admin: Api) -> None:
        self.server, self.admin = server, admin
        self.team_a, self.team_b = admin.new_team(), admin.new_team()
        a, b = admin.new_user(), admin.new_user()
        admin.add_member(self.team_a, a, "member")
        admin.add_member(self.team_b, b, "member")
        self.a, self.b = api_for(server.url, a), api_for(server.url, b)

    def outputs(self, team: str, job_id: str) -> Path:
        return self.server.data_dir / "teams" / team / "outputs" / job_id

    def run(self, api: Api, team: str, name: str, files: dict[str, Any], **kw: Any) -> str:
        api.ok(upload(api, team, name, targz(files)), 201)
        body = {"name": name, "workers": 1, "code": name, **kw}
        job = api.ok(api.post(f"/api/v1/teams/{team}/jobs", json=body), 201)
        wait_job(api, str(job["id"]), {"Succeeded", "Failed"}, timeout=180)
        return str(job["id"])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    server, admin, tag = start_server(tmp_path_factory.mktemp("links"), "sqlite", None)
    w = None
    try:
        w = World(server, admin)
        victim = w.run(
            w.b, w.team_b, "victim", {"run.sh": VICTIM, "events.bin": _event_file(B_TAG)}
        )
        victim_out = w.outputs(w.team_b, victim)
        assert (victim_out / "secret.txt").read_text().strip() == B_SECRET
        database = server.data_dir / "tfkube.db"
        decoy = server.data_dir.parent / "decoy.txt"
        decoy.write_text(f"{PASSWD}:decoy\n")
        engine = server.data_dir / "teams" / w.team_a / "engine" / "jobs" / "planter"
        script = attacker(victim_out, database, engine / "logs" / "worker-0.log", decoy)
        planted = w.run(w.a, w.team_a, "planter", {"run.sh": script})
        # A job's whole output folder replaced by a link to team B's: what a pod mounting
        # the team's claim whole can do (or a job on an engine that cannot confine it);
        # a confined local job cannot, so the test does it once the job ended.
        moved = w.run(w.a, w.team_a, "mover", {"run.sh": "#!/bin/sh\necho moved\n"})
        shutil.rmtree(w.outputs(w.team_a, moved))
        w.outputs(w.team_a, moved).symlink_to(victim_out)
        yield {"w": w, "planted": planted, "moved": moved, "victim": victim}
    finally:
        if w is not None:
            w.a.close()
            w.b.close()
        stop_server(server, admin, tag)


def _leaks(data: bytes) -> list[str]:
    found = []
    for name, mark in (
        ("/etc/passwd", PASSWD.encode()),
        ("the server's database", SQLITE),
        ("team B's log", B_LOG.encode()),
        ("team B's output", B_SECRET.encode()),
    ):
        if mark in data:
            found.append(name)
    return found


def _untar(data: bytes) -> dict[str, bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar:
            f = tar.extractfile(member)
            out[member.name] = f.read() if f is not None else b""
    return out


def test_logs_do_not_follow_planted_links(world: dict[str, Any]) -> None:
    a, job = world["w"].a, world["planted"]
    listed = a.ok(a.get(f"/api/v1/jobs/{job}/logs"))
    shown = {(f["replica"], f["attempt"]) for f in listed}
    assert shown == {("worker-0", 0)}, f"links, a hard link or a FIFO listed as logs: {shown}"
    # No kept log of that name: the engine's own log of the replica, or 404; never the
    # link's target (and the FIFO never hangs the answer).
    for attempt in (91, 92, 93, 94):
        r = a.get(f"/api/v1/jobs/{job}/logs/worker-0", params={"attempt": attempt}, timeout=20)
        assert r.status_code in {200, 404}
        assert not _leaks(r.content), (attempt, _leaks(r.content))
    r = a.get(f"/api/v1/jobs/{job}/logs/chief-0", timeout=20)
    assert r.status_code == 404, (r.status_code, _leaks(r.content))
    r = a.get(f"/api/v1/jobs/{job}/logs/worker-0", params={"follow": "true"}, timeout=20)
    assert r.status_code == 200
    assert "planted" in r.text
    assert not _leaks(r.content)
    # The search across every log reads none of them either (nor hangs on the FIFO).
    url = f"/api/v1/jobs/{job}/logs/search"
    for text in ("root:x", "SQLite format", B_LOG):
        found = a.ok(a.get(url, params={"q": text}, timeout=20))
        assert found["hits"] == [], (text, found["hits"])
    found = a.ok(a.get(url, params={"q": "planted"}, timeout=20))
    assert [(h["replica"], h["attempt"]) for h in found["hits"]] == [("worker-0", 0)]


def test_outputs_listing_and_downloads_do_not_follow_links(world: dict[str, Any]) -> None:
    a, job = world["w"].a, world["planted"]
    listed = {f["path"] for f in a.ok(a.get(f"/api/v1/jobs/{job}/outputs"))}
    for planted in ("etc", "victim", "database.bin", "passwd.txt", "progress.json"):
        assert planted not in listed, f"{planted} (a link or a hard link) is listed"
    for path in ("etc", "victim", "victim/.tfkube/logs"):
        r = a.get(f"/api/v1/jobs/{job}/outputs", params={"path": path})
        assert r.status_code in {400, 404}, (path, r.status_code, r.text[:200])
    for path in ("database.bin", "passwd.txt", "victim/secret.txt", "etc/passwd"):
        r = a.get(f"/api/v1/jobs/{job}/outputs/{path}")
        assert r.status_code in {400, 404}, (path, r.status_code, _leaks(r.content))
    everything = a.get(f"/api/v1/jobs/{job}/outputs/")
    assert everything.status_code == 200
    packed = _untar(everything.content)
    assert ".tfkube/logs/worker-0/0.log" in packed
    leaked = {name: _leaks(data) for name, data in packed.items() if _leaks(data)}
    assert not leaked, f"the folder's .tar.gz holds link targets: {leaked}"


def test_a_checkpoint_of_hard_links_is_not_packed(world: dict[str, Any]) -> None:
    a, job = world["w"].a, world["planted"]
    r = a.get(f"/api/v1/jobs/{job}/checkpoint")
    if r.status_code == 200:  # found without the hard-linked data file would be wrong too
        assert not any("data-" in f for f in r.json()["files"]), r.json()
    download = a.get(f"/api/v1/jobs/{job}/checkpoint/download")
    if download.status_code == 200:
        packed = _untar(download.content)
        assert not {n: _leaks(d) for n, d in packed.items() if _leaks(d)}


def test_scalars_progress_and_exports_do_not_follow_links(world: dict[str, Any]) -> None:
    w, job = world["w"], world["planted"]
    victim = w.b.ok(w.b.get(f"/api/v1/jobs/{world['victim']}/scalars"))
    assert any(s["tag"] == B_TAG for s in victim["series"])  # B sees its own
    assert victim["progress"]["total"] == 777
    assert w.b.ok(w.b.get(f"/api/v1/jobs/{world['victim']}"))["exports"] == [5]
    mine = w.a.ok(w.a.get(f"/api/v1/jobs/{job}/scalars"))
    assert not any(s["tag"] == B_TAG for s in mine["series"]), "B's scalars through a link"
    assert mine["progress"]["total"] != 777, "B's progress.json through a link"
    assert w.a.ok(w.a.get(f"/api/v1/jobs/{job}"))["exports"] == [], "B's export through a link"


def test_a_launcher_message_linked_to_a_file_is_not_read(world: dict[str, Any]) -> None:
    a, job = world["w"].a, world["planted"]
    shown = a.ok(a.get(f"/api/v1/jobs/{job}"))
    text = str(shown["replicas"]) + str(shown.get("message"))
    assert PASSWD not in text, "the supervisor read /etc/passwd as the launcher's message"
    events = a.get(f"/api/v1/jobs/{job}/events").text
    assert PASSWD not in events


def test_an_output_folder_replaced_by_a_link_is_not_read(world: dict[str, Any]) -> None:
    a, job = world["w"].a, world["moved"]
    r = a.get(f"/api/v1/jobs/{job}/outputs")
    assert r.status_code == 404 or r.json() == [], r.text[:300]
    for path in ("secret.txt", ".tfkube/logs/worker-0/0.log", ""):
        r = a.get(f"/api/v1/jobs/{job}/outputs/{path}")
        assert r.status_code == 404, (path, r.status_code, _leaks(r.content))
    assert a.ok(a.get(f"/api/v1/jobs/{job}/logs")) == []
    found = a.ok(a.get(f"/api/v1/jobs/{job}/logs/search", params={"q": B_LOG}))
    assert (found["hits"], found["total_files"]) == ([], 0)
    r = a.get(f"/api/v1/jobs/{job}/logs/worker-0")  # the engine's own log, if any
    assert not _leaks(r.content), _leaks(r.content)
    scalars = a.ok(a.get(f"/api/v1/jobs/{job}/scalars"))
    assert not scalars["series"]
    assert a.ok(a.get(f"/api/v1/jobs/{job}"))["exports"] == []


def test_safefs_refuses_what_a_workload_can_make(tmp_path: Path) -> None:
    """The primitives themselves, on a folder a job could have made (no server)."""
    import os

    from tfkube.safefs import Refused, closing, open_dir, open_file, open_root, walk

    root = tmp_path / "out"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "ok.txt").write_text("fine")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("KEY")
    (root / "dirlink").symlink_to(secret)
    (root / "sub" / "filelink").symlink_to(secret / "key")
    os.link(secret / "key", root / "hard")
    os.mkfifo(root / "fifo")
    (tmp_path / "rootlink").symlink_to(root)

    with closing(open_root(root)) as fd:
        seen = {"/".join(rel): e.kind for rel, e in walk(fd)}
        assert seen == {
            "dirlink": "link",
            "fifo": "other",
            "hard": "other",
            "sub": "dir",
            "sub/filelink": "link",
            "sub/ok.txt": "file",
        }
        with closing(open_file(fd, ["sub", "ok.txt"])) as f:
            assert os.read(f, 10) == b"fine"
        for parts in (["dirlink", "key"], ["sub", "filelink"], ["hard"], ["fifo"], ["sub"]):
            _refused(lambda parts=parts: open_file(fd, parts))  # never blocks on the FIFO
        _refused(lambda: open_dir(fd, ["dirlink"]))
        with pytest.raises(Refused):
            os.close(open_file(fd, ["sub", "..", "hard"]))
        # A folder swapped for a link after it was listed: the walk never enters it.
        (root / "sub" / "ok.txt").unlink()
        (root / "sub" / "filelink").unlink()
        (root / "sub").rmdir()
        (root / "sub").symlink_to(secret)
        _refused(lambda: open_file(fd, ["sub", "key"]))
    _refused(lambda: open_root(tmp_path / "rootlink"))


def _refused(opening: Callable[[], int]) -> None:
    """`opening` fails as safefs fails on what a workload made: Refused, or the kernel's
    ELOOP (a link where O_NOFOLLOW was asked) or ENOTDIR (a link where a folder was)."""
    import errno
    import os

    from tfkube.safefs import Refused

    why = "not a plain|changed while|Too many levels of symbolic links|Not a directory"
    with pytest.raises(OSError, match=why) as caught:
        os.close(opening())
    assert isinstance(caught.value, Refused) or caught.value.errno in {errno.ELOOP, errno.ENOTDIR}
