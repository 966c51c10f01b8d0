"""The HDFS the data-source tests read from: Apache Hadoop's MiniDFSCluster started once
per test session, only when a test asks for `hdfs_store` (tools/hdfs/minihdfs.py: built
into ~/.cache/tfkube by tools/hdfs/build.sh, every port a free loopback one, stopped by
PID). Outside CI a missing build is a skip with the hint; under CI=true it is built first
(Maven Central through mvn, some 20 s with a warm cache) and a failure fails. `make test`
builds it beside the tests (tools/test/suite.sh): its tests wait for that build when it is
still under way."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tooling import BUILDS_BESIDE, load_tool, waiting_for_build

_minihdfs = load_tool("tfkube_tools_hdfs", "hdfs", "minihdfs.py")
HdfsUnavailable = _minihdfs.HdfsUnavailable
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def hdfs_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    try:
        # Under make test, which builds it beside the tests: a wait for that build.
        with waiting_for_build(request.config, "HDFS (MiniDFSCluster)", _minihdfs.BUILD):
            hdfs = _minihdfs.start_minihdfs(build=IN_CI or BUILDS_BESIDE)
    except HdfsUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true and HDFS is unavailable: {exc}", pytrace=False)
        pytest.skip(f"HDFS is unavailable: {exc}")
    try:
        yield hdfs
    finally:
        hdfs.stop()
