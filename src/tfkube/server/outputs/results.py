"""A job's result: the final metrics one of its replicas wrote to `$TFKUBE_LOG_DIR/
result.json` (`tfkube.contract.RESULT_FILE`, its rules in `contract.parse_result`).

The job wrote it, so it is read through `tfkube.safefs` (no link followed, nothing but a
plain file with one name, at most `RESULT_MAX_BYTES` + 1 read: a larger file is refused,
not cut). The sync loop keeps what it read with the job when the job ends (the jobs list
sorts by it); a job page reads it live while the job runs."""

from __future__ import annotations

from dataclasses import dataclass

from tfkube import contract
from tfkube.safefs import Refused
from tfkube.server.core.tables import Job
from tfkube.server.outputs.folder import LocalFolder, OutputsFolder


@dataclass(frozen=True)
class ResultRead:
    values: dict[str, contract.ResultValue] | None
    """The metrics, or None when there is no usable file."""
    problem: str = ""
    """Why a file that is there was not used (shown to the job's team), else ''."""


def read_result(output_dir: str | OutputsFolder | None) -> ResultRead:
    """The job's result file (in its output folder or its archive: `folder.OutputsFolder`),
    read safely; no file is no result and no problem."""
    if not output_dir:
        return ResultRead(None)
    folder = LocalFolder(output_dir) if isinstance(output_dir, str) else output_dir
    try:
        data = folder.read_bytes([contract.RESULT_FILE], contract.RESULT_MAX_BYTES + 1)
    except Refused as exc:  # a link, a FIFO, a file with two names: the job made it
        return ResultRead(None, f"{contract.RESULT_FILE} was not read: {exc}")
    except OSError:  # none, or the outputs folder itself is gone or not a folder
        return ResultRead(None)
    try:
        return ResultRead(contract.parse_result(data))
    except ValueError as exc:
        return ResultRead(None, f"{contract.RESULT_FILE} was not used: {exc}")


def current_result(row: Job, outputs: OutputsFolder | None = None) -> ResultRead:
    """What a job reported: what was kept when it ended, else its file as it is now (a
    job that runs may have written it already; a job that ended without a usable one
    says why). `outputs`: where its outputs live when not (only) in its output folder
    (the archive, `Platform.outputs`)."""
    if row.result is not None:
        return ResultRead(dict(row.result))
    return read_result(outputs or row.output_dir)
