"""The throwaway HDFS of the data-source tests (tools/hdfs/, issue 19): Apache Hadoop's
MiniDFSCluster answers WebHDFS on loopback; a file put through it (the NameNode's redirect
to the DataNode, as a client does) is listed with its size and read back whole; every
port it listens on is a loopback one."""

from __future__ import annotations

import ipaddress
import os
from typing import Any

import psutil


def test_minihdfs_keeps_a_file_and_listens_on_loopback_only(hdfs_store: Any) -> None:
    body = os.urandom(1024 * 1024 + 5)
    hdfs_store.put("/datasets/digits/part-0.bin", body)
    hdfs_store.put("/datasets/digits/sub/part-1.txt", b"hello hdfs\n")
    listed = {s["pathSuffix"]: s for s in hdfs_store.list("/datasets/digits")}
    assert listed["part-0.bin"]["type"] == "FILE"
    assert listed["part-0.bin"]["length"] == len(body)
    assert listed["sub"]["type"] == "DIRECTORY"
    assert hdfs_store.read("/datasets/digits/part-0.bin") == body
    assert hdfs_store.uri.startswith("hdfs://127.0.0.1:")
    listening = {
        c.laddr.ip
        for c in psutil.Process(hdfs_store.process.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening, "MiniDFSCluster listens on nothing?"
    # Java's sockets are IPv6 ones: 127.0.0.1 shows as ::ffff:127.0.0.1.
    addresses = {ipaddress.ip_address(a) for a in listening}
    plain = {a.ipv4_mapped or a if isinstance(a, ipaddress.IPv6Address) else a for a in addresses}
    assert plain == {ipaddress.ip_address("127.0.0.1")}, listening
