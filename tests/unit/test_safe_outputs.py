"""Pure rules of reading what workloads wrote: download names in Content-Disposition
(RFC 6266/5987) and the one-component names `tfkube.safefs` accepts."""

from __future__ import annotations

import pytest

from tfkube.safefs import Refused, check_part
from tfkube.server.outputs.files import attachment


@pytest.mark.parametrize(
    ("name", "plain", "exact"),
    [
        pytest.param("model.tar.gz", "model.tar.gz", "model.tar.gz", id="plain"),
        pytest.param('a"b.txt', "a_b.txt", "a%22b.txt", id="quote"),
        pytest.param(
            "a\r\nSet-Cookie: x", "a__Set-Cookie__x", "a%0D%0ASet-Cookie%3A%20x", id="crlf"
        ),
        pytest.param("ré sumé.txt", "r__sum_.txt", "r%C3%A9%20sum%C3%A9.txt", id="utf-8"),
        pytest.param("a;b\\c", "a_b_c", "a%3Bb%5Cc", id="separators"),
        pytest.param("...", "download", "...", id="dots-only"),
        pytest.param("", "download", "", id="empty"),
        pytest.param("\x00x", "_x", "%00x", id="nul"),
    ],
)
def test_attachment(name: str, plain: str, exact: str) -> None:
    header = attachment(name)
    assert header == f"attachment; filename=\"{plain}\"; filename*=UTF-8''{exact}"
    assert header.isascii()
    assert not any(c in header for c in "\r\n\x00")


@pytest.mark.parametrize("part", ["", ".", "..", "a/b", "/", "a\x00"])
def test_check_part_refuses(part: str) -> None:
    with pytest.raises(Refused):
        check_part(part)


@pytest.mark.parametrize("part", ["a", ".tfkube", "..a", "a..", "with space", "é"])
def test_check_part_accepts(part: str) -> None:
    assert check_part(part) == part
