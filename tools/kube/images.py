#!/usr/bin/env python3
"""Container images for the test cluster's real node, built here without a registry (stdlib).

    python3 tools/kube/images.py build     # build what is missing or out of date
    python3 tools/kube/images.py check     # exit 1 when an image is missing (builds nothing)
    python3 tools/kube/images.py list      # image name and OCI layout folder of each

Two images, each an OCI image layout (oci-layout, index.json, blobs/) in
`~/.cache/tfkube/images/<image>-<recipe hash>/`, imported into containerd by streaming the
folder as a tar to `ctr images import -` (cluster.py does it when the real node starts):

- `docker.io/tensorflow/tensorflow:2.21.0` — the name the rendered manifests use for stock
  images (`tfkube.api.DEFAULT_IMAGE`), so they run unchanged with `imagePullPolicy:
  IfNotPresent`. Recipe (`TENSORFLOW`): Debian bookworm from the Debian mirror (mmdebstrap,
  variant `essential` plus `python3`, `python3-pip`, `ca-certificates`), then
  `pip install -r images/tensorflow-requirements.txt` inside it (tensorflow-cpu, TensorBoard,
  scikit-learn, numpy: what the launcher, the examples and TensorBoard need). `__pycache__`
  is kept so TensorFlow imports fast; pip's downloads are cached in `~/.cache/tfkube/pip`.
- `localhost/tfkube/pause:1` — the pod sandbox image: one static program (tools/kube/pause,
  built by `build.sh --with-node`), since registry.k8s.io/pause cannot be pulled here.

Each image is rebuilt only when its recipe changes: the folder name carries the SHA-256 of
the recipe (the constants below, the requirements file, the pause binary). A build runs in a
temporary folder under the cache and is renamed into place at the end, one at a time (flock).
To push the TensorFlow image to a real registry, see docs/testing.md ("Images").
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "images" / "tensorflow-requirements.txt"
FORMAT = 1
"""Bump when the packing below changes in a way that must rebuild every image."""

TENSORFLOW_NAME = "docker.io/tensorflow/tensorflow:2.21.0"
PAUSE_NAME = "localhost/tfkube/pause:1"
TENSORFLOW = {
    "suite": "bookworm",
    "variant": "essential",
    "include": ["python3", "python3-pip", "ca-certificates", "bash", "libstdc++6"],
    "env": {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
    },
    "cmd": ["/bin/bash"],
}
"""The TensorFlow image's recipe (with the requirements file): what its hash covers."""
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class ImageError(RuntimeError):
    pass


def cache_root() -> Path:
    if os.environ.get("TFKUBE_CACHE"):
        return Path(os.environ["TFKUBE_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "tfkube"


def _log(msg: str) -> None:
    print(f"kube-images: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Image:
    """One image: its name in containerd and the cached OCI layout folder it comes from."""

    key: str
    name: str
    recipe_hash: str
    root: Path

    @property
    def layout(self) -> Path:
        return self.root / f"{self.key}-{self.recipe_hash[:16]}"

    def present(self) -> bool:
        return (self.layout / "index.json").is_file() and (self.layout / "image.json").is_file()


def tensorflow_image(root: Path | None = None) -> Image:
    recipe = json.dumps(
        {"format": FORMAT, "name": TENSORFLOW_NAME, **TENSORFLOW}, sort_keys=True
    ).encode()
    digest = hashlib.sha256(recipe + REQUIREMENTS.read_bytes()).hexdigest()
    return Image("tensorflow", TENSORFLOW_NAME, digest, (root or cache_root()) / "images")


def pause_image(pause_binary: Path, root: Path | None = None) -> Image:
    if not pause_binary.is_file():
        raise ImageError(f"{pause_binary} is missing: run `tools/kube/build.sh --with-node`")
    recipe = f"format={FORMAT} name={PAUSE_NAME}\n".encode()
    digest = hashlib.sha256(recipe + pause_binary.read_bytes()).hexdigest()
    return Image("pause", PAUSE_NAME, digest, (root or cache_root()) / "images")


# --------------------------------------------------------------------------- OCI layout


def _blob(layout: Path, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def write_layout(layout: Path, layer_tar: Path, name: str, config: dict[str, object]) -> str:
    """An OCI image layout with one uncompressed layer (moved in from `layer_tar`).

    Uncompressed because it is only ever imported on this machine (gzip would cost minutes
    of CPU for a 3 GB layer); a registry push may compress it (see docs/testing.md).
    Returns the manifest digest."""
    layer_digest = _file_digest(layer_tar)
    blob = layout / "blobs" / "sha256" / layer_digest
    blob.parent.mkdir(parents=True, exist_ok=True)
    size = layer_tar.stat().st_size
    layer_tar.replace(blob)
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        "history": [{"created_by": "tools/kube/images.py", "created": "1970-01-01T00:00:00Z"}],
    }
    config_desc = _blob(layout, json.dumps(image_config, sort_keys=True).encode(), OCI_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config_desc,
        "layers": [{"mediaType": OCI_LAYER, "digest": f"sha256:{layer_digest}", "size": size}],
    }
    manifest_desc = _blob(layout, json.dumps(manifest, sort_keys=True).encode(), OCI_MANIFEST)
    tag = name.rsplit(":", 1)[1]
    manifest_desc["annotations"] = {
        "io.containerd.image.name": name,  # the full name ctr import gives the image
        "org.opencontainers.image.ref.name": tag,  # what skopeo/podman read from a layout
    }
    manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
    index = {"schemaVersion": 2, "manifests": [manifest_desc]}
    (layout / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}\n')
    return str(manifest_desc["digest"])


# --------------------------------------------------------------------------- builds


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _finish(image: Image, tmp: Path, layer: Path, config: dict[str, object], t0: float) -> None:
    layout = tmp / "layout"
    digest = write_layout(layout, layer, image.name, config)
    size = sum(p.stat().st_size for p in layout.rglob("*") if p.is_file())
    meta = {
        "name": image.name,
        "manifest": digest,
        "recipe_sha256": image.recipe_hash,
        "bytes": size,
        "build_seconds": round(time.monotonic() - t0, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (layout / "image.json").write_text(json.dumps(meta, indent=2) + "\n")
    for old in image.root.glob(f"{image.key}-*"):  # an older recipe's folder
        if old != image.layout and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    layout.replace(image.layout)
    mib = size / 2**20
    _log(f"{image.name}: built in {meta['build_seconds']}s ({mib:.0f} MiB) at {image.layout}")


def build_pause(image: Image, pause_binary: Path) -> None:
    with _locked(image.root):
        if image.present():
            return
        t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=".build-pause-", dir=image.root))
        try:
            layer = tmp / "layer.tar"
            with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
                info = tar.gettarinfo(str(pause_binary), arcname="pause")
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mode = 0o755
                info.mtime = 0
                with pause_binary.open("rb") as f:
                    tar.addfile(info, f)
            _finish(image, tmp, layer, {"Entrypoint": ["/pause"]}, t0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(argv: list[str], **kwargs: object) -> None:
    _log("$ " + " ".join(argv))
    proc = subprocess.run(argv, check=False, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise ImageError(f"{argv[0]} failed with exit code {proc.returncode}")


def _pip_env() -> dict[str, str]:
    """pip inside the chroot: the cache, and the CA bundle and index this machine's pip uses."""
    env = {
        "PATH": str(TENSORFLOW["env"]["PATH"]),  # type: ignore[index]
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "PIP_CACHE_DIR": "/tfkube-build/pip-cache",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_ROOT_USER_ACTION": "ignore",
        "PIP_BREAK_SYSTEM_PACKAGES": "1",  # the image's own Python is the one to use
        "PIP_NO_WARN_SCRIPT_LOCATION": "1",
    }
    for key in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_DEFAULT_TIMEOUT"):
        if os.environ.get(key):
            env[key] = os.environ[key]
    return env


def _host_ca_bundle() -> Path | None:
    for key in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        if os.environ.get(key) and Path(os.environ[key]).is_file():
            return Path(os.environ[key])
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default if default.is_file() else None


def build_tensorflow(image: Image) -> None:
    with _locked(image.root):
        if image.present():
            return
        if os.geteuid() != 0:
            raise ImageError("building the TensorFlow image needs root (mmdebstrap, chroot)")
        if shutil.which("mmdebstrap") is None:
            raise ImageError("mmdebstrap is missing: run tools/kube/node-deps.sh")
        t0 = time.monotonic()
        _log(f"{image.name}: building (Debian {TENSORFLOW['suite']} + pip); minutes when cold")
        tmp = Path(tempfile.mkdtemp(prefix=".build-tensorflow-", dir=image.root))
        rootfs = tmp / "rootfs"
        mounts: list[Path] = []
        try:
            _run(
                [
                    "mmdebstrap",
                    "--mode=root",
                    "--format=directory",
                    f"--variant={TENSORFLOW['variant']}",
                    "--include=" + ",".join(TENSORFLOW["include"]),  # type: ignore[arg-type]
                    "--aptopt=Acquire::Retries=3",
                    "--quiet",
                    str(TENSORFLOW["suite"]),
                    str(rootfs),
                ]
            )
            build_dir = rootfs / "tfkube-build"
            pip_cache = cache_root() / "pip"
            pip_cache.mkdir(parents=True, exist_ok=True)
            (build_dir / "pip-cache").mkdir(parents=True)
            shutil.copy(REQUIREMENTS, build_dir / "requirements.txt")
            env = _pip_env()
            ca = _host_ca_bundle()
            if ca is not None:
                shutil.copy(ca, build_dir / "ca.crt")
                env["PIP_CERT"] = "/tfkube-build/ca.crt"
            shutil.copy("/etc/resolv.conf", rootfs / "etc" / "resolv.conf")
            for source, target in (
                ("/proc", rootfs / "proc"),
                ("/dev", rootfs / "dev"),
                (str(pip_cache), build_dir / "pip-cache"),
            ):
                target.mkdir(parents=True, exist_ok=True)
                _run(["mount", "--rbind" if source == "/dev" else "--bind", source, str(target)])
                mounts.append(target)
            _run(
                [
                    "chroot",
                    str(rootfs),
                    "python3",
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "-r",
                    "/tfkube-build/requirements.txt",
                ],
                env=env,
            )
            _unmount_all(mounts)
            shutil.rmtree(build_dir)
            (rootfs / "etc" / "resolv.conf").write_text("")  # the runtime mounts its own
            for junk in ("var/lib/apt/lists", "var/cache/apt", "root/.cache", "tmp"):
                path = rootfs / junk
                if path.is_dir():
                    for child in path.iterdir():
                        shutil.rmtree(child) if child.is_dir() else child.unlink()
            layer = tmp / "layer.tar"
            # GNU tar: fast, keeps owners, modes and mtimes (pyc files check their source's
            # mtime: clamping mtimes would make every import recompile).
            _run(
                [
                    "tar",
                    "--numeric-owner",
                    "--sort=name",
                    "--xattrs",
                    "-C",
                    str(rootfs),
                    "-cf",
                    str(layer),
                    ".",
                ]
            )
            shutil.rmtree(rootfs)
            config = {
                "Env": [f"{k}={v}" for k, v in TENSORFLOW["env"].items()],  # type: ignore[attr-defined]
                "Cmd": TENSORFLOW["cmd"],
                "WorkingDir": "/",
            }
            _finish(image, tmp, layer, config, t0)
        finally:
            _unmount_all(mounts)
            shutil.rmtree(tmp, ignore_errors=True)


def _unmount_all(mounts: list[Path]) -> None:
    while mounts:
        target = mounts.pop()
        subprocess.run(["umount", "-R", "-l", str(target)], check=False, capture_output=True)


# --------------------------------------------------------------------------- import


def import_image(ctr: list[str], image: Image, timeout: float = 900.0) -> None:
    """Stream the OCI layout as a tar (GNU tar, no archive on disk) into `ctr images import -`."""
    if not image.present():
        raise ImageError(f"{image.name} is not built: run `python3 tools/kube/images.py build`")
    with subprocess.Popen(
        ["tar", "-C", str(image.layout), "--exclude=./image.json", "-cf", "-", "."],
        stdout=subprocess.PIPE,
    ) as tar:
        proc = subprocess.run(
            [*ctr, "images", "import", "-"],
            stdin=tar.stdout,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        tar_code = tar.wait(timeout)
    if proc.returncode != 0 or tar_code != 0:
        out = (proc.stdout + proc.stderr).decode(errors="replace")
        raise ImageError(f"importing {image.name} failed ({proc.returncode}): {out[-2000:]}")


# --------------------------------------------------------------------------- CLI


def images(bin_dir: Path) -> list[Image]:
    return [pause_image(bin_dir / "tfkube-pause"), tensorflow_image()]


def default_bin_dir() -> Path:
    out = subprocess.run(
        ["bash", str(HERE / "build.sh"), "--print-bin-dir"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def build_all(bin_dir: Path) -> list[Image]:
    pause, tf = images(bin_dir)
    if not pause.present():
        build_pause(pause, bin_dir / "tfkube-pause")
    if not tf.present():
        build_tensorflow(tf)
    return [pause, tf]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cmd", choices=["build", "check", "list"])
    parser.add_argument("--bin-dir", help="where tfkube-pause is (default: build.sh's)")
    args = parser.parse_args(argv)
    bin_dir = Path(args.bin_dir) if args.bin_dir else default_bin_dir()
    try:
        found = build_all(bin_dir) if args.cmd == "build" else images(bin_dir)
    except ImageError as exc:
        _log(f"FAILED: {exc}")
        return 1
    missing = [i for i in found if not i.present()]
    for image in found:
        state = "ready" if image.present() else "MISSING (python3 tools/kube/images.py build)"
        print(f"{image.name}\t{image.layout}\t{state}")
    return 1 if missing and args.cmd == "check" else 0


if __name__ == "__main__":
    sys.exit(main())
