"""A process reference names the process we started, however the clock moves.

The local engine's server reads the job records its supervisors wrote: a supervisor
records its own reference, and the server asks whether that process still runs. The wall-
clock start time is the kernel's boot time in whole seconds plus the kernel's tick count,
and that boot second moves when the clock is slewed or stepped; two processes reading it
minutes apart can disagree by a whole second about the same process. CI once failed a
live job as SupervisorLost that way (the supervisor was found running at teardown)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tfkube.engines.local._procs import (
    CLOCK_TICKS,
    alive,
    ref_data,
    ref_from,
    ref_of,
    since_boot,
)
from tfkube.engines.local._store import ProcessRef


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_reference_written_when_the_boot_second_read_otherwise_still_names_the_process(
    child: subprocess.Popen[bytes],
) -> None:
    ref = ref_of(child.pid)
    for moved in (-1.0, 1.0):  # what another process read when the boot second had moved
        seen_elsewhere = ProcessRef(
            pid=ref.pid, create_time=ref.create_time + moved, since_boot=ref.since_boot
        )
        assert alive(seen_elsewhere) is not None


def test_a_recycled_pid_is_not_ours(child: subprocess.Popen[bytes]) -> None:
    ref = ref_of(child.pid)
    assert ref.since_boot is not None
    one_tick_earlier = ref.model_copy(update={"since_boot": ref.since_boot - 1 / CLOCK_TICKS})
    assert alive(one_tick_earlier) is None
    assert alive(ref) is not None


def test_a_reference_from_before_since_boot_allows_the_boot_second_only(
    child: subprocess.Popen[bytes],
) -> None:
    """Records and handles written by an older tfkube carry the wall-clock start only."""
    ref = ref_of(child.pid)
    assert alive(ProcessRef(pid=ref.pid, create_time=ref.create_time + 1.0)) is not None
    assert alive(ProcessRef(pid=ref.pid, create_time=ref.create_time - 3.0)) is None


def test_a_handle_keeps_the_reference_whole(child: subprocess.Popen[bytes]) -> None:
    ref = ref_of(child.pid)
    assert ref_from(ref_data(ref)) == ref
    old_handle = {"pid": ref.pid, "started": ref.create_time, "port": 1}
    assert ref_from(old_handle) == ProcessRef(pid=ref.pid, create_time=ref.create_time)
    assert ref_from({"port": 1}) is None


def test_an_ended_process_is_gone(child: subprocess.Popen[bytes]) -> None:
    ref = ref_of(child.pid)
    child.kill()
    child.wait()
    assert alive(ref) is None
    with pytest.raises(Exception, match="process"):
        since_boot(child.pid)
