"""A small WebHDFS client (standard library only): what staging an `hdfs://` source needs
and nothing more (docs/architecture.md, "Data sources", says why not a PyPI client).

    GETFILESTATUS   is the source a file or a folder (a missing path: HdfsError "missing")
    LISTSTATUS      a folder's entries: name, type, length, modificationTime
    OPEN            a file's bytes: the NameNode redirects (307) to a DataNode, followed

Simple authentication: `user.name` on every request when a user is given (HADOOP_USER_NAME
or the job's credentials). The user travels in the query string only: an error never
quotes a URL, so it never reaches a log, an event or the status.

A server's team job gives `allowed` (the server's `--allow-fetch-from` ranges): then every
host asked, the NameNode and each DataNode it redirects to, is resolved and judged by
`tfkube.netguard.refused` before any connection, so a member's NameNode cannot point the
server at its own loopback services or private network. (The name is resolved again when
urllib connects: a rebinding DNS name could answer differently, as for an S3 endpoint.)
"""

from __future__ import annotations

import ipaddress
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from tfkube.netguard import IPNetwork, refused

CONNECT_TIMEOUT = 5.0
"""The NameNode not answering within this is "unreachable" (urllib has one timeout for
connecting and each read; staging reads are given READ_TIMEOUT)."""
READ_TIMEOUT = 60.0


class HdfsError(Exception):
    """What WebHDFS said, for a person: `kind` is "missing", "denied", "unreachable" or
    "error". The message never holds the user or a URL."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class HdfsFile:
    path: str
    """Absolute."""
    length: int
    modification_time: int
    """Milliseconds since the epoch, as the NameNode keeps it."""


REFUSED = (
    "is an address this server does not fetch from for a team (loopback, link-local or "
    "private, unless an administrator allows its range: --allow-fetch-from), or it does "
    "not resolve"
)


def judge(url: str, allowed: Sequence[IPNetwork]) -> None:
    """HdfsError("refused") unless every address of the URL's host may be fetched from."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    try:
        found = socket.getaddrinfo(host, parts.port or 80, type=socket.SOCK_STREAM)
        addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found}
    except (OSError, UnicodeError, ValueError):
        addresses = set()
    if not addresses or any(refused(a, allowed) for a in addresses):
        raise HdfsError("refused", f"WebHDFS's host {host} {REFUSED}")


class _Guarded(urllib.request.HTTPRedirectHandler):
    """Follows a redirect (the NameNode's to a DataNode) only to a host `judge` allows."""

    def __init__(self, allowed: Sequence[IPNetwork]) -> None:
        self.allowed = allowed

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        try:
            judge(newurl, self.allowed)
        except HdfsError:
            fp.close()  # the NameNode's answer, not followed
            raise
        return super().redirect_request(req, fp, code, msg, headers, newurl)


@dataclass
class WebHdfs:
    base: str
    """`http://namenode:9870/webhdfs/v1`."""
    user: str | None = field(default=None, repr=False)
    allowed: tuple[IPNetwork, ...] | None = None
    """A server's team job: the ranges allowed beside public addresses (every host asked
    is judged); None (`tfkube run`): the user's own machine, nothing judged."""

    def __post_init__(self) -> None:
        handlers = [] if self.allowed is None else [_Guarded(self.allowed)]
        self._opener = urllib.request.build_opener(*handlers)

    def _url(self, path: str, op: str, **params: str) -> str:
        query = {"op": op, **params}
        if self.user:
            query["user.name"] = self.user
        return f"{self.base}{urllib.parse.quote(path)}?{urllib.parse.urlencode(query)}"

    def _get(self, path: str, op: str, timeout: float, **params: str) -> Any:
        if self.allowed is not None:
            judge(self.base, self.allowed)
        try:
            return self._opener.open(self._url(path, op, **params), timeout=timeout)
        except urllib.error.HTTPError as exc:
            raise _refusal(exc, path) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise HdfsError(
                "unreachable",
                f"WebHDFS at {self.base.removesuffix('/webhdfs/v1')} cannot be reached "
                f"({type(reason).__name__}); check the NameNode's address and "
                "spec.storage.data.endpoint (its HTTP port, 9870 by default)",
            ) from None

    def _json(self, path: str, op: str) -> Any:
        with self._get(path, op, CONNECT_TIMEOUT) as answer:
            try:
                return json.loads(answer.read())
            except ValueError:
                raise HdfsError("error", f"{path}: WebHDFS answered {op} with no JSON") from None

    def status(self, path: str) -> dict[str, Any]:
        return dict(self._json(path, "GETFILESTATUS")["FileStatus"])

    def listing(self, path: str) -> list[dict[str, Any]]:
        return list(self._json(path, "LISTSTATUS")["FileStatuses"]["FileStatus"])

    def walk(self, path: str, limit: int) -> list[HdfsFile]:
        """Every file at or below `path` (a file: itself), sorted by path; HdfsError when
        more than `limit`."""
        top = self.status(path)
        if top.get("type") == "FILE":
            return [HdfsFile(path, int(top["length"]), int(top["modificationTime"]))]
        out: list[HdfsFile] = []
        folders = [path]
        while folders:
            folder = folders.pop()
            for entry in self.listing(folder):
                child = f"{folder.rstrip('/')}/{entry['pathSuffix']}"
                if entry.get("type") == "DIRECTORY":
                    folders.append(child)
                elif entry.get("type") == "FILE":
                    out.append(
                        HdfsFile(child, int(entry["length"]), int(entry["modificationTime"]))
                    )
                    if len(out) > limit:
                        raise HdfsError("error", f"more than {limit:,} files; give a narrower path")
        return sorted(out, key=lambda f: f.path)

    def open(self, path: str, offset: int = 0) -> BinaryIO:
        """A file's bytes from `offset` on, streamed from the DataNode the NameNode
        redirects to."""
        params = {"offset": str(offset)} if offset else {}
        answer: BinaryIO = self._get(path, "OPEN", READ_TIMEOUT, **params)
        return answer


def _refusal(exc: urllib.error.HTTPError, path: str) -> HdfsError:
    try:
        remote = json.loads(exc.read()).get("RemoteException", {})
    except (ValueError, AttributeError, OSError):
        remote = {}
    name = str(remote.get("exception", ""))
    if exc.code == 404 or name == "FileNotFoundException":
        return HdfsError("missing", f"{path} does not exist")
    if exc.code in (401, 403) or name in ("AccessControlException", "SecurityException"):
        return HdfsError(
            "denied",
            f"{path}: the NameNode refused the user ({name or exc.code}); check "
            "HADOOP_USER_NAME or the credentials",
        )
    return HdfsError("error", f"{path}: WebHDFS answered {exc.code} {name}".rstrip())
