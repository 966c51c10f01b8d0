"""GPU placement for the local engine: the user gives counts, tfkube picks the devices.

Every replica gets `CUDA_VISIBLE_DEVICES`: the devices assigned to it, or an empty value
when it asks for none, so that a PS or a CPU-only worker never grabs a GPU by accident
(TensorFlow takes every visible GPU by default). Devices in use by other running local
jobs are not handed out twice.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tfkube import contract


class NotEnoughGpus(ValueError):
    pass


def available_gpus(env: Mapping[str, str] | None = None, dev: Path = Path("/dev")) -> list[str]:
    """This machine's GPU ids: $TFKUBE_GPUS ("0,1", or "" / "none"), else /dev/nvidiaN."""
    env = os.environ if env is None else env
    configured = env.get(contract.GPUS)
    if configured is not None:
        ids = [g.strip() for g in configured.split(",")]
        return [g for g in ids if g and g.lower() != "none"]
    found = [m.group(1) for p in dev.glob("nvidia*") if (m := re.fullmatch(r"nvidia(\d+)", p.name))]
    return sorted(found, key=int)


def assign_gpus(
    requests: Sequence[tuple[str, int]], available: Sequence[str], in_use: Iterable[str] = ()
) -> dict[str, list[str]]:
    """Give each replica (key, count) its own devices, first come first served.

    Raises NotEnoughGpus when the free devices do not cover every request."""
    busy = set(in_use)
    free = [g for g in available if g not in busy]
    wanted = sum(n for _, n in requests)
    if wanted > len(free):
        if busy:
            raise NotEnoughGpus(
                f"the job asks for {wanted} GPUs; {len(free)} of this machine's "
                f"{len(available)} are free"
            )
        raise NotEnoughGpus(
            f"the job asks for {wanted} GPUs; this machine has {len(available)} "
            "(set TFKUBE_GPUS to list the devices to use)"
        )
    out: dict[str, list[str]] = {}
    for key, n in requests:
        out[key], free = free[:n], free[n:]
    return out
