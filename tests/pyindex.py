"""A package index on 127.0.0.1 for tests that install a requirements.txt: a PEP 503
simple index served from a folder of distributions the test builds itself, so no test
sends traffic beyond loopback.

- `wheel(folder, name, files)`: a pure-Python wheel, written by hand (a zip with its
  METADATA, WHEEL and RECORD).
- `probing_sdist(folder, name, targets)`: a source distribution whose build (an in-tree
  PEP 517 backend, no build requirements) tries to GET /secret.txt from each (label,
  host, port) in `targets`, directly and through the HTTP(S) proxy its environment
  names (HTTP CONNECT), and builds a
  wheel whose module holds what each attempt got (`RESULT`, a dict label -> text), as a
  malicious package's build code would try to reach the host's services.
- `PackageIndex(folder)`: serves the folder (`/simple/<name>/`, `/files/<file>`) on
  127.0.0.1 on a free port from a thread; `.url` is the index URL; `.stop()`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import inspect
import io
import json
import os
import re
import tarfile
import textwrap
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TINY = "tfkube-test-tiny"
"""A package no machine has: its module `tfkube_test_tiny` holds `GREETING`."""
PROBE = "tfkube-test-probe"
"""The sdist whose build code probes the network (module `tfkube_test_probe`)."""


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _module(name: str) -> str:
    return normal(name).replace("-", "_")


def write_wheel(folder: str, dist: str, name: str, files: dict[str, str]) -> str:
    """A py3-none-any wheel of `files` (path -> text) of distribution `dist` (its name
    as METADATA says) 1.0, module name `name`, in `folder`: its file name. Standard
    library only: the probing sdist's backend carries this function's source (and
    imports what it uses)."""
    info = f"{name}-1.0.dist-info"
    entries = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tfkube-tests\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in entries.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    out = f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(folder, out), "w") as z:
        for path, text in entries.items():
            z.writestr(path, text)
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return out


def wheel(folder: Path, name: str, files: dict[str, str]) -> Path:
    """A py3-none-any wheel of `name` 1.0 holding `files` (path in the wheel -> text)."""
    return folder / write_wheel(str(folder), name, _module(name), files)


BACKEND = '''
"""An in-tree PEP 517 backend whose build probes the network, as an attacker's would."""
import base64, hashlib, json, os, socket, urllib.parse, zipfile

def _fetch(s):
    s.sendall(b"GET /secret.txt HTTP/1.0\\r\\n\\r\\n")
    got = b""
    while chunk := s.recv(4096):
        got += chunk
    return got.decode(errors="replace").replace("\\r\\n", " | ")

def _probe(host, port):
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            s.settimeout(5)
            return "REACHED " + _fetch(s)
    except OSError as exc:
        return f"UNREACHABLE {exc}"

def _through_proxy(host, port):
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if not proxy:
        return "NO PROXY"
    p = urllib.parse.urlsplit(proxy)
    try:
        with socket.create_connection((p.hostname, p.port), timeout=5) as s:
            s.settimeout(5)
            ask = f"CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n"
            s.sendall(ask.encode())
            answer = s.recv(400).decode(errors="replace")
            if answer.startswith("HTTP/1.1 200"):
                return "REACHED " + _fetch(s)
            return "PROXY SAID " + answer.replace("\\r\\n", " | ")
    except OSError as exc:
        return f"UNREACHABLE {exc}"

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "targets.json")) as f:
        targets = json.load(f)
    result = {}
    for label, host, port in targets:
        result[label] = _probe(host, port)
        result[label + " via proxy"] = _through_proxy(host, port)
    return write_wheel(
        wheel_directory, DIST, MODULE, {f"{MODULE}/__init__.py": f"RESULT = {result!r}\\n"}
    )
'''


def probing_sdist(folder: Path, name: str, targets: list[tuple[str, str, int]]) -> Path:
    """A source distribution of `name` 1.0 whose build probes `targets` (see the module)."""
    module = _module(name)
    root = f"{module}-1.0"
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        "pyproject.toml": textwrap.dedent(
            f"""\
            [build-system]
            requires = []
            build-backend = "probe_backend"
            backend-path = ["."]

            [project]
            name = "{name}"
            version = "1.0"
            """
        ),
        "probe_backend.py": f"MODULE = {module!r}\nDIST = {name!r}\n"
        + BACKEND
        + inspect.getsource(write_wheel),
        "targets.json": json.dumps(targets),
    }
    out = folder / f"{root}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for path, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(f"{root}/{path}")
            member.size = len(data)
            member.mode = 0o644
            tar.addfile(member, io.BytesIO(data))
    return out


class PackageIndex:
    """A PEP 503 simple index of `folder`'s distributions on 127.0.0.1 (a thread)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.requests: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_GET(self, head: bool = False) -> None:
                index.requests.append(self.path)
                body, kind = index.answer(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def do_HEAD(self) -> None:
                self.do_GET(head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/simple/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _files(self) -> dict[str, list[Path]]:
        found: dict[str, list[Path]] = {}
        for path in sorted(self.folder.iterdir()):
            stem = path.name.removesuffix(".tar.gz").removesuffix(".whl")
            found.setdefault(normal(stem.split("-")[0]), []).append(path)
        return found

    def answer(self, path: str) -> tuple[bytes | None, str]:
        path = path.split("?", 1)[0]
        if path.startswith("/files/"):
            target = self.folder / path.removeprefix("/files/")
            if target.parent == self.folder and target.is_file():
                return target.read_bytes(), "application/octet-stream"
            return None, ""
        m = re.fullmatch(r"/simple/([^/]+)/?", path)
        if m is None:
            return None, ""
        dists = self._files().get(normal(m.group(1)))
        if not dists:
            return None, ""
        links = "".join(
            f'<a href="/files/{html.escape(p.name)}#sha256='
            f'{hashlib.sha256(p.read_bytes()).hexdigest()}">{html.escape(p.name)}</a>\n'
            for p in dists
        )
        return f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode(), "text/html"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def tiny_index(folder: Path) -> PackageIndex:
    """An index holding `TINY` 1.0 (a wheel), from `folder` (made if need be)."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel(folder, TINY, {"tfkube_test_tiny/__init__.py": "GREETING = 'hello from the index'\n"})
    return PackageIndex(folder)
