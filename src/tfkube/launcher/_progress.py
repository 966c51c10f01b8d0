"""What counts as a replica's progress, and the heartbeat that says it on Kubernetes.

Progress (runPolicy.stallSeconds) is the same on both engines: a new line of output, or a
newer write anywhere in the job's shared log/checkpoint folder except tfkube's own copy of
the replicas' output (`.tfkube/`; every replica's log lands there, so it would make a
silent replica look busy). The local supervisor reads the mtimes itself
(`latest_write`). In a pod nothing outside can watch the program's output, so the
launcher keeps a heartbeat file (TFKUBE_HEARTBEAT_FILE) fresh while there is progress
(and while it sets up: fetching code and installing requirements is not the program
stalling); the pod's readiness probe, rendered by `tfkube.render`, fails when the file
is stallSeconds old.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from pathlib import Path

from tfkube import contract

MAX_SCAN = 5000
"""Entries of the log folder looked at per scan: a folder of millions of files must not
turn a cheap check into a disk crawl (the newest checkpoints are near the top anyway)."""
SCAN_EVERY = 2.0
"""Seconds between two scans of the log folder by the launcher."""
MIN_TOUCH_INTERVAL = 1.0
"""A chatty program touches the heartbeat at most this often (mtimes are read in seconds)."""


def latest_write(folder: Path, limit: int = MAX_SCAN) -> float:
    """The newest mtime of `folder` and what is below it (the first `limit` entries),
    leaving out tfkube's own copy of the replicas' output (`.tfkube/`)."""
    latest = 0.0
    stack = [folder]
    seen = 0
    while stack and seen < limit:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.name == contract.KEPT_LOGS_SUBDIR[0]:
                        continue
                    seen += 1
                    with contextlib.suppress(OSError):
                        latest = max(latest, entry.stat(follow_symlinks=False).st_mtime)
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
        except OSError:
            continue
    with contextlib.suppress(OSError):
        latest = max(latest, folder.stat().st_mtime)
    return latest


class Heartbeat:
    """Touches `path` on progress. `beat()` is called by the tee for each chunk of output;
    a daemon thread beats while the launcher sets up, then whenever the log folder has a
    newer write than it last saw."""

    def __init__(self, path: str, log_dir: str, scan_every: float = SCAN_EVERY) -> None:
        self.path = Path(path)
        self.log_dir = Path(log_dir) if log_dir else None
        self.scan_every = scan_every
        self.running = threading.Event()
        """Set once the program runs: from then on only progress beats."""
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.touched = -math.inf  # the first beat always touches (monotonic time may be small)
        self.seen_write = 0.0

    def beat(self, force: bool = False) -> None:
        now = time.monotonic()
        with self.lock:
            if not force and now - self.touched < MIN_TOUCH_INTERVAL:
                return
            self.touched = now
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()

    def check(self) -> None:
        """One tick: beat while setting up, or when the log folder was written since."""
        if not self.running.is_set():
            self.beat()
            return
        if self.log_dir is None:
            return
        latest = latest_write(self.log_dir)
        if latest > self.seen_write:
            self.seen_write = latest
            self.beat()

    def program_started(self) -> None:
        """From now on only progress counts; writes made so far are not progress."""
        if self.log_dir is not None:
            self.seen_write = latest_write(self.log_dir)
        self.beat(force=True)
        self.running.set()

    def _loop(self) -> None:
        while not self.done.wait(self.scan_every):
            self.check()

    def start(self) -> Heartbeat:
        self.beat(force=True)
        threading.Thread(target=self._loop, daemon=True).start()
        return self

    def stop(self) -> None:
        self.done.set()


def start_heartbeat(path: str | None, log_dir: str) -> Heartbeat | None:
    """The heartbeat when the engine asked for one (TFKUBE_HEARTBEAT_FILE), else None."""
    return Heartbeat(path, log_dir).start() if path else None
