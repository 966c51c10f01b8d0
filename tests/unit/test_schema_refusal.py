"""Which database schemas a tfkube opens (`schema_refusal`): its own and older ones (it
upgrades them), an empty database; never one a newer tfkube upgraded."""

from __future__ import annotations

from tfkube.server.core.db import schema_refusal

KNOWN = {"0001", "0002", "0003"}


def test_its_own_an_older_and_an_empty_schema_open() -> None:
    assert schema_refusal(["0003"], KNOWN, "0003", "1.0") is None
    assert schema_refusal(["0001"], KNOWN, "0003", "1.0") is None
    assert schema_refusal([], KNOWN, "0003", "1.0") is None


def test_a_newer_schema_is_refused_with_what_to_do() -> None:
    why = schema_refusal(["0004"], KNOWN, "0003", "1.0")
    assert why is not None
    assert "revision 0004" in why
    assert "newest is 0003" in why
    assert "tfkube 1.0" in why
    assert "downgrade is not supported" in why
    assert "restore the database backup" in why
    # Two heads, one of them unknown: still refused, naming the unknown one only.
    both = schema_refusal(["0002", "0009"], KNOWN, "0003", "1.0")
    assert both is not None
    assert "revision 0009," in both
