"""The one-component names `tfkube.safefs` accepts (pure)."""

from __future__ import annotations

import pytest

from tfkube.safefs import Refused, check_part


@pytest.mark.parametrize("part", ["", ".", "..", "a/b", "/", "a\x00"])
def test_check_part_refuses(part: str) -> None:
    with pytest.raises(Refused):
        check_part(part)


@pytest.mark.parametrize("part", ["a", ".tfkube", "..a", "a..", "with space", "é"])
def test_check_part_accepts(part: str) -> None:
    assert check_part(part) == part
