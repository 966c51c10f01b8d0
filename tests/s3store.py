"""The S3-compatible store the data-source tests read from: SeaweedFS started once per
test session, only when a test asks for `s3_store` (tools/s3/seaweed.py: built into
~/.cache/tfkube by tools/s3/build.sh, every port a free loopback one, stopped by PID).
Without it the tests that need it are skipped, except under CI=true, where a missing store
is a failure. `make test` builds it beside the tests (tools/test/suite.sh): its tests then
wait for that build when it is still under way."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tooling import BUILDS_BESIDE, load_tool, waiting_for_build

_seaweed = load_tool("tfkube_tools_s3", "s3", "seaweed.py")
Seaweed = _seaweed.Seaweed
S3Unavailable = _seaweed.S3Unavailable
start_seaweed = _seaweed.start_seaweed
IN_CI = os.environ.get("CI", "").lower() == "true"


class S3Store:
    """The running store and a client of it (boto3, as the engine uses)."""

    def __init__(self, server: Any) -> None:
        import boto3

        self.server = server
        self.endpoint: str = server.endpoint
        self.access_key: str = server.access_key
        self.secret_key: str = server.secret_key
        self.client = boto3.session.Session(
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key
        ).client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    @property
    def env(self) -> dict[str, str]:
        """The credentials as a process's environment gives them."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}

    def bucket(self) -> str:
        """A new, empty bucket (retried while the store is still settling after start)."""
        name = f"t-{uuid.uuid4().hex[:12]}"
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.create_bucket(Bucket=name)
                return name
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=bucket, Key=key, Body=data)


@pytest.fixture(scope="session")
def s3_store(request: pytest.FixtureRequest) -> Iterator[S3Store]:
    try:
        # Outside CI a missing binary is a skip with the hint, not a 20-minute build; under
        # make test, which builds it beside the tests, a wait for that build.
        with waiting_for_build(request.config, "S3 store (SeaweedFS)", _seaweed.BUILD):
            server = _seaweed.start_seaweed(build=IN_CI or BUILDS_BESIDE)
    except S3Unavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true and the S3 store is unavailable: {exc}", pytrace=False)
        pytest.skip(f"the S3 store is unavailable: {exc}")
    try:
        yield S3Store(server)
    finally:
        server.stop()
