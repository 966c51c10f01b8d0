"""Listing a job's outputs (`server/outputs/files.list_folder`): the top of outputs nothing
has written yet is empty, not missing (a client polling a starting job for its first
checkpoint got a 404); anything below it that is missing, or a link, stays NotInOutputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfkube.server.outputs.files import NotInOutputs, list_folder


def test_outputs_not_yet_written_are_an_empty_folder(tmp_path: Path) -> None:
    assert list_folder(str(tmp_path / "not-yet"), ()) == []


def test_a_missing_folder_below_the_top_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotInOutputs):
        list_folder(str(tmp_path / "not-yet"), ("checkpoint",))
    (tmp_path / "out").mkdir()
    with pytest.raises(NotInOutputs):
        list_folder(str(tmp_path / "out"), ("checkpoint",))


def test_a_top_that_is_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret").write_text("x")
    os.symlink(tmp_path / "elsewhere", tmp_path / "out")
    with pytest.raises(NotInOutputs):
        list_folder(str(tmp_path / "out"), ())


def test_files_and_folders_are_listed(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "result.json").write_text("{}")
    found = {(f.path, f.is_dir) for f in list_folder(str(tmp_path), ())}
    assert found == {("checkpoint", True), ("result.json", False)}
