#!/usr/bin/env python3
"""Container images for the test cluster's real node, built here without a registry (stdlib).

    python3 tools/kube/images.py build     # build what is missing or out of date
    python3 tools/kube/images.py check     # exit 1 when an image is missing (builds nothing)
    python3 tools/kube/images.py list      # image name and OCI layout folder of each

Four images, each an OCI image layout (oci-layout, index.json, blobs/) in
`~/.cache/tfkube/images/<image>-<recipe hash>/`, imported into containerd by streaming the
folder as a tar to `ctr images import -` (cluster.py does it when the real node starts):

- `docker.io/tensorflow/tensorflow:2.21.0` — the name the rendered manifests use for stock
  images (`tfkube.spec.DEFAULT_IMAGE`), so they run unchanged with `imagePullPolicy:
  IfNotPresent`. Recipe (`TENSORFLOW`): Debian bookworm from the Debian mirror (mmdebstrap,
  variant `essential` plus `python3`, `python3-pip`, `ca-certificates`), then
  `pip install -r images/tensorflow-requirements.txt` inside it (tensorflow-cpu, TensorBoard,
  scikit-learn, numpy: what the launcher, the examples and TensorBoard need). `__pycache__`
  is kept so TensorFlow imports fast; pip's downloads are cached in `~/.cache/tfkube/pip`.
- `ghcr.io/tfkube/operator:<version>` — tfkube's own image, under the name the renderer
  gives it (`tfkube.render.OPERATOR_IMAGE`), so model servers with the `tfkube` runtime (and
  notebooks) run unchanged. Three layers: the TensorFlow image's layer (the same blob,
  hard-linked: no second copy), then tfkube's dependencies (`pip install` of what
  pyproject.toml lists for the `serving`, `server`, `kubernetes` and `notebook` extras, run in
  the TensorFlow image through an overlay mount, so the layer holds only what pip added;
  cached under `images/layers/` by the hash of those requirements), then tfkube itself (a
  `pip install --no-deps` of this checkout, and the native model server that
  tools/modelserver/build.sh built, `/usr/local/bin/tfkube-modelserver`, which the `tfkube`
  serving runtime runs; keyed by the hash of the source and of the binary, so a change
  rebuilds in seconds). Non-root (65532) like deploy/Dockerfile, which builds the
  same thing for a registry. The same recipe builds another tree of tfkube (a release from
  this repository's history: `tfkube_image(tf, source=..., tag=...)`) as
  `ghcr.io/tfkube/operator:<tag>`, over the same dependency layer; the upgrade test
  (tests/cluster/test_real_node_upgrade.py) builds and imports it itself.
- `ghcr.io/tfkube/postgres:15-bookworm` — the platform server's PostgreSQL (`tfkube install
  --server --database postgres`, `tfkube.render.POSTGRES_IMAGE`). Recipe (`POSTGRES`): Debian
  bookworm's `postgresql-15` (mmdebstrap, variant `essential`), its user `postgres` made
  with uid/gid 999 before the package is installed (the uid the manifests run it as, the
  same as the Docker Library's `postgres` image), the cluster the package makes removed (the
  pod makes its own on its claim), docs, man pages, translations, locale sources and the
  LLVM JIT left out. The start-up
  script is in the manifest (`tfkube.render._postgres`), not in the image.
- `localhost/tfkube/pause:1` — the pod sandbox image: one static program (tools/kube/pause,
  built by `build.sh --with-node`), since registry.k8s.io/pause cannot be pulled here.

Each image is rebuilt only when its recipe changes: the folder name carries the SHA-256 of
the recipe (the constants below, the requirements file, the pause binary; for tfkube's
image the TensorFlow image's recipe, the extras' requirements and the source). A build runs in a
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
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
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
POSTGRES_NAME = "ghcr.io/tfkube/postgres:15-bookworm"
POSTGRES_UID = 999
POSTGRES = {
    "suite": "bookworm",
    "variant": "essential",
    "include": ["postgresql-15"],
    "uid": POSTGRES_UID,
    "dpkg_exclude": ["/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*"],
    "drop": [
        "usr/share/doc",
        "usr/share/man",
        "usr/share/locale",
        "usr/share/info",
        "usr/share/lintian",
        "usr/share/i18n",  # locale sources: the pods use C.UTF-8, built into glibc
        # The JIT (LLVM, 135 MB): without its provider PostgreSQL just plans without it
        # (`jit_provider`), which a server's small transactions never needed.
        "usr/lib/postgresql/15/lib/llvmjit.so",
        "usr/lib/postgresql/15/lib/llvmjit_types.bc",
        "usr/lib/postgresql/15/lib/bitcode",
        "usr/lib/x86_64-linux-gnu/libLLVM-14.so.1",
        "usr/lib/x86_64-linux-gnu/libz3.so.4",
        "var/lib/postgresql/15",
        "etc/postgresql/15",
        "var/lib/apt/lists",
        "var/cache/apt",
        "var/log",
        "tmp",
    ],
    "env": {
        "PATH": "/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
        ":/sbin:/bin",
        "LANG": "C.UTF-8",
        "PGDATA": "/var/lib/postgresql/data/pgdata",
    },
    "user": f"{POSTGRES_UID}:{POSTGRES_UID}",
    "cmd": ["postgres"],
}
"""The PostgreSQL image's recipe: what its hash covers. Its `PATH` puts PostgreSQL 15's own
programs (initdb, postgres, pg_ctl, pg_isready, pg_dump, psql) before Debian's wrappers."""
TFKUBE_EXTRAS = ("serving", "server", "kubernetes", "notebook")
"""What tfkube's image installs (deploy/Dockerfile's list): the model server (`serving`),
`tfkube server`, `tfkube operator` and notebooks."""
TFKUBE = {
    "env": {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "HOME": "/tmp",
    },
    "user": "65532:65532",
    "cmd": ["tfkube", "operator"],
}
"""tfkube's image config, as deploy/Dockerfile sets it: non-root, HOME in the writable /tmp
(pods run it with a read-only root filesystem)."""
NATIVE_BINARY = "tfkube-modelserver"
"""The native model server in tfkube's image's /usr/local/bin (`tfkube.modelserver.BINARY`;
the `tfkube` runtime's command, `tfkube.render`)."""
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"
"""Where pip installs as root in Debian 12's Python (the TensorFlow image's)."""
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
    native: Path | None = None
    """tfkube's image: the native model server it carries (`tfkube-modelserver`)."""

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


def tfkube_version(repo: Path = REPO) -> str:
    text = (repo / "src" / "tfkube" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    if found is None:
        raise ImageError("src/tfkube/__init__.py has no __version__")
    return found.group(1)


def tfkube_name(repo: Path = REPO) -> str:
    """`tfkube.render.OPERATOR_IMAGE` (this script cannot import tfkube: stdlib only)."""
    return f"ghcr.io/tfkube/operator:{tfkube_version(repo)}"


def tfkube_requirements(repo: Path = REPO) -> list[str]:
    """tfkube's own dependencies and those of TFKUBE_EXTRAS, from pyproject.toml."""
    import tomllib

    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in TFKUBE_EXTRAS:
        wanted += project["optional-dependencies"][extra]
    return sorted(set(wanted))


def _source_files(repo: Path) -> list[Path]:
    """What a wheel of the checkout is built from (no caches, no build leftovers)."""
    files = [repo / "pyproject.toml", repo / "README.md"]
    for path in sorted((repo / "src").rglob("*")):
        parts = path.relative_to(repo).parts
        if path.is_file() and not any(p == "__pycache__" or p.endswith(".egg-info") for p in parts):
            files.append(path)
    return files


def source_digest(repo: Path = REPO) -> str:
    sha = hashlib.sha256()
    for path in _source_files(repo):
        sha.update(str(path.relative_to(repo)).encode() + b"\0")
        sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()


def deps_key(tensorflow: Image, repo: Path = REPO) -> str:
    """The dependency layer's key: the image below it and the requirements it installs."""
    recipe = json.dumps(
        {"format": FORMAT, "below": tensorflow.recipe_hash, "requires": tfkube_requirements(repo)},
        sort_keys=True,
    )
    return hashlib.sha256(recipe.encode()).hexdigest()


def native_model_server(repo: Path = REPO, build: bool = False) -> Path:
    """The native model server of this checkout (tools/modelserver/build.sh's binary in
    the cache), for tfkube's image: its rpath finds TensorFlow from /usr/local/bin in the
    image's dist-packages as in the venv. `build`: build it when missing or out of date
    (a no-op otherwise); else ImageError when it is not built."""
    script = repo / "tools" / "modelserver" / "build.sh"
    env = {**os.environ, "VENV": os.environ.get("VENV", str(repo / ".venv"))}
    if build:
        made = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
        if made.returncode != 0:
            raise ImageError(f"the native model server did not build:\n{made.stderr[-2000:]}")
    out = subprocess.run(["bash", str(script), "--print-bin"], env=env, capture_output=True,
                         text=True)  # fmt: skip
    found = Path(out.stdout.strip())
    if out.returncode != 0 or not found.is_file():
        raise ImageError(
            f"the native model server is not built ({out.stderr.strip() or found}): "
            "run `make modelserver` (or this script's `build`)"
        )
    return found


def tfkube_image(
    tensorflow: Image,
    repo: Path = REPO,
    source: Path | None = None,
    tag: str | None = None,
    native: Path | None = None,
) -> Image:
    """tfkube's image of this checkout; with `source` and `tag`, of another tree of tfkube
    (its pyproject.toml, README.md and src/: a release from this repository's history, for
    the upgrade test) as `ghcr.io/tfkube/operator:<tag>` over this checkout's dependency
    layer (a release's own dependencies are not rebuilt: it runs with today's libraries, as
    tests/release.py runs it), in a folder of its own (`operator-<tag>-<hash>`). `native`:
    the native model server it carries in /usr/local/bin (`native_model_server()`), keyed
    by its bytes; a release's image has none (its model servers run `python3 -m
    tfkube.serving`)."""
    if (source is None) != (tag is None):
        raise ImageError("give both source and tag (another tree of tfkube), or neither")
    name = tfkube_name(repo) if tag is None else f"ghcr.io/tfkube/operator:{tag}"
    # not `tfkube-...`: an older images.py removes every `tfkube-*` folder but its own
    key = "tfkube" if tag is None else f"operator-{re.sub(r'[^A-Za-z0-9_.-]', '-', tag)}"
    recipe = json.dumps(
        {
            "format": FORMAT,
            "name": name,
            "deps": deps_key(tensorflow, repo),
            "source": source_digest(source or repo),
            "native": _file_digest(native) if native is not None else None,
            **TFKUBE,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(recipe.encode()).hexdigest()
    return Image(key, name, digest, tensorflow.root, native)


def postgres_image(root: Path | None = None) -> Image:
    recipe = json.dumps(
        {"format": FORMAT, "name": POSTGRES_NAME, "hook": _postgres_user_hook(), **POSTGRES},
        sort_keys=True,
    )
    digest = hashlib.sha256(recipe.encode()).hexdigest()
    return Image("postgres", POSTGRES_NAME, digest, (root or cache_root()) / "images")


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


@dataclass(frozen=True)
class Layer:
    """An uncompressed layer tar and its digest (None: computed when it is written)."""

    tar: Path
    digest: str | None = None


def _link(source: Path, target: Path) -> None:
    """A hard link (the same blob on disk, whatever image it belongs to), else a copy."""
    if target.exists():
        return
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def write_layout(layout: Path, layers: list[Layer], name: str, config: dict[str, object]) -> str:
    """An OCI image layout of uncompressed layers, each hard-linked in from its tar.

    Uncompressed because it is only ever imported on this machine (gzip would cost minutes
    of CPU for a 3 GB layer); a registry push may compress it (see docs/testing.md).
    Returns the manifest digest."""
    descriptors = []
    for layer in layers:
        digest = layer.digest or _file_digest(layer.tar)
        blob = layout / "blobs" / "sha256" / digest
        blob.parent.mkdir(parents=True, exist_ok=True)
        _link(layer.tar, blob)
        size = blob.stat().st_size
        descriptors.append({"mediaType": OCI_LAYER, "digest": f"sha256:{digest}", "size": size})
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in descriptors]},
        "history": [
            {"created_by": "tools/kube/images.py", "created": "1970-01-01T00:00:00Z"}
            for _ in descriptors
        ],
    }
    config_desc = _blob(layout, json.dumps(image_config, sort_keys=True).encode(), OCI_CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config_desc,
        "layers": descriptors,
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


def layers_of(image: Image) -> list[Layer]:
    """A built image's layers, from its manifest (blob paths and digests)."""
    index = json.loads((image.layout / "index.json").read_text())
    manifest_digest = index["manifests"][0]["digest"].split(":", 1)[1]
    blobs = image.layout / "blobs" / "sha256"
    manifest = json.loads((blobs / manifest_digest).read_text())
    out = []
    for desc in manifest["layers"]:
        digest = desc["digest"].split(":", 1)[1]
        out.append(Layer(blobs / digest, digest))
    return out


# --------------------------------------------------------------------------- builds


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _finish(
    image: Image, tmp: Path, layers: list[Layer], config: dict[str, object], t0: float
) -> None:
    layout = tmp / "layout"
    digest = write_layout(layout, layers, image.name, config)
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
    # an older recipe's folder (`<key>-<16 hex>`: not another key's that starts the same)
    for old in image.root.glob(f"{image.key}-{'?' * 16}"):
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
            _finish(image, tmp, [Layer(layer)], {"Entrypoint": ["/pause"]}, t0)
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


def _chroot_for_pip(rootfs: Path, mounts: list[Path]) -> dict[str, str]:
    """Make `rootfs` ready for `chroot rootfs python3 -m pip install ...`: /proc, /dev,
    pip's cache (bind mounts, appended to `mounts`), DNS and the CA bundle for the download,
    all in `rootfs/tfkube-build` or undone by the caller. Returns pip's environment."""
    build_dir = rootfs / "tfkube-build"
    pip_cache = cache_root() / "pip"
    pip_cache.mkdir(parents=True, exist_ok=True)
    (build_dir / "pip-cache").mkdir(parents=True)
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
    return env


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
            env = _chroot_for_pip(rootfs, mounts)
            shutil.copy(REQUIREMENTS, build_dir / "requirements.txt")
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
            _finish(image, tmp, [Layer(layer)], config, t0)
        finally:
            _unmount_all(mounts)
            shutil.rmtree(tmp, ignore_errors=True)


def _postgres_user_hook() -> str:
    """mmdebstrap's essential hook (a shell command; `$1` is the new root): the `postgres`
    user and group with the fixed uid/gid, before `postgresql-common` would pick one (its
    maintainer script keeps an existing system user)."""
    uid = POSTGRES_UID
    user = f"postgres:x:{uid}:{uid}:PostgreSQL administrator:/var/lib/postgresql:/bin/sh"
    shadow = "postgres:*:19000:0:99999:7:::"
    return (
        f'echo "{user}" >> "$1/etc/passwd" && '
        f'echo "postgres:x:{uid}:" >> "$1/etc/group" && '
        f'if [ -f "$1/etc/shadow" ]; then echo "{shadow}" >> "$1/etc/shadow"; fi && '
        'if [ -f "$1/etc/gshadow" ]; then echo "postgres:*::" >> "$1/etc/gshadow"; fi'
    )


def build_postgres(image: Image) -> None:
    """Debian bookworm's PostgreSQL 15 as one layer (mmdebstrap; no chroot of ours, no pip)."""
    with _locked(image.root):
        if image.present():
            return
        if os.geteuid() != 0:
            raise ImageError("building the PostgreSQL image needs root (mmdebstrap)")
        if shutil.which("mmdebstrap") is None:
            raise ImageError("mmdebstrap is missing: run tools/kube/node-deps.sh")
        t0 = time.monotonic()
        _log(f"{image.name}: building (Debian {POSTGRES['suite']}'s postgresql-15)")
        tmp = Path(tempfile.mkdtemp(prefix=".build-postgres-", dir=image.root))
        rootfs = tmp / "rootfs"
        try:
            _run(
                [
                    "mmdebstrap",
                    "--mode=root",
                    "--format=directory",
                    f"--variant={POSTGRES['variant']}",
                    "--include=" + ",".join(POSTGRES["include"]),  # type: ignore[arg-type]
                    "--aptopt=Acquire::Retries=3",
                    *[f"--dpkgopt=path-exclude={p}" for p in POSTGRES["dpkg_exclude"]],  # type: ignore[attr-defined]
                    f"--essential-hook={_postgres_user_hook()}",
                    "--quiet",
                    str(POSTGRES["suite"]),
                    str(rootfs),
                ]
            )
            passwd = (rootfs / "etc" / "passwd").read_text()
            wanted = f"postgres:x:{POSTGRES_UID}:{POSTGRES_UID}:"
            if not any(line.startswith(wanted) for line in passwd.splitlines()):
                raise ImageError(f"the image's postgres user is not {POSTGRES_UID}: {passwd}")
            for junk in POSTGRES["drop"]:  # type: ignore[attr-defined]
                _empty(rootfs / junk)
            (rootfs / "tmp").mkdir(mode=0o1777)
            (rootfs / "tmp").chmod(0o1777)
            (rootfs / "var" / "log").mkdir()
            data = rootfs / "var" / "lib" / "postgresql" / "data"
            data.mkdir(parents=True)
            os.chown(data, POSTGRES_UID, POSTGRES_UID)
            data.chmod(0o700)
            (rootfs / "etc" / "resolv.conf").write_text("")  # the runtime mounts its own
            layer = tmp / "layer.tar"
            _run(
                ["tar", "--numeric-owner", "--sort=name", "--xattrs",
                 "-C", str(rootfs), "-cf", str(layer), "."]
            )  # fmt: skip
            shutil.rmtree(rootfs)
            config = {
                "Env": [f"{k}={v}" for k, v in POSTGRES["env"].items()],  # type: ignore[attr-defined]
                "User": POSTGRES["user"],
                "Cmd": POSTGRES["cmd"],
                "WorkingDir": "/",
                "ExposedPorts": {"5432/tcp": {}},
                "StopSignal": "SIGINT",
            }
            _finish(image, tmp, [Layer(layer)], config, t0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _overlay_whiteouts(upper: Path) -> None:
    """overlayfs marks a deleted file with a 0/0 character device and a replaced folder with
    the xattr trusted.overlay.opaque; an OCI layer says the same with `.wh.<name>` and
    `.wh..wh..opq` files (OCI image spec, "Whiteouts")."""
    for dirpath, dirnames, filenames in os.walk(upper):
        folder = Path(dirpath)
        for name in filenames:
            path = folder / name
            info = path.lstat()
            if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
                path.unlink()
                (folder / f".wh.{name}").touch()
        for name in dirnames:
            try:
                opaque = os.getxattr(folder / name, "trusted.overlay.opaque", follow_symlinks=False)
            except OSError:
                continue
            if opaque == b"y":
                (folder / name / ".wh..wh..opq").touch()


def _empty(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def deps_layer(tensorflow: Image, repo: Path = REPO) -> Layer:
    """tfkube's dependencies as one layer over the TensorFlow image, built once per
    `deps_key` (under `images/layers/`): the TensorFlow layer unpacked as the lower folder of
    an overlay mount, `pip install` of the requirements chrooted into it (what the image
    already has, TensorFlow included, is kept), and the overlay's upper folder is the
    layer. The caller holds the images lock."""
    key = deps_key(tensorflow, repo)
    folder = tensorflow.root / "layers"
    tar = folder / f"tfkube-deps-{key[:16]}.tar"
    digest_file = folder / f"tfkube-deps-{key[:16]}.sha256"
    if tar.is_file() and digest_file.is_file():
        return Layer(tar, digest_file.read_text().strip())
    if os.geteuid() != 0:
        raise ImageError("building tfkube's dependency layer needs root (overlay mount, chroot)")
    requirements = tfkube_requirements(repo)
    t0 = time.monotonic()
    _log(f"tfkube's dependencies: building a layer of {len(requirements)} requirements")
    tmp = Path(tempfile.mkdtemp(prefix=".build-tfkube-deps-", dir=tensorflow.root))
    lower, upper, work, merged = (tmp / n for n in ("lower", "upper", "work", "merged"))
    mounts: list[Path] = []
    try:
        for made in (lower, upper, work, merged):
            made.mkdir()
        for layer in layers_of(tensorflow):
            _run(["tar", "--numeric-owner", "-C", str(lower), "-xf", str(layer.tar)])
        options = f"lowerdir={lower},upperdir={upper},workdir={work}"
        _run(["mount", "-t", "overlay", "overlay", "-o", options, str(merged)])
        mounts.append(merged)
        env = _chroot_for_pip(merged, mounts)
        _run(
            ["chroot", str(merged), "python3", "-m", "pip", "install", "--quiet", *requirements],
            env=env,
        )
        _unmount_all(mounts)  # the bind mounts, then the overlay
        for junk in ("tfkube-build", "etc/resolv.conf", "root/.cache"):
            _empty(upper / junk)
        if (upper / "tmp").is_dir():
            for child in (upper / "tmp").iterdir():
                _empty(child)
        _overlay_whiteouts(upper)
        built = tmp / "deps.tar"
        _run(["tar", "--numeric-owner", "--sort=name", "-C", str(upper), "-cf", str(built), "."])
        digest = _file_digest(built)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("tfkube-deps-*"):  # an older key's (images link theirs)
            old.unlink()
        built.replace(tar)
        digest_file.write_text(digest + "\n")
        mib = tar.stat().st_size / 2**20
        _log(f"tfkube's dependencies: layer built in {time.monotonic() - t0:.1f}s ({mib:.0f} MiB)")
        return Layer(tar, digest)
    finally:
        _unmount_all(mounts)
        shutil.rmtree(tmp, ignore_errors=True)


def source_layer(tmp: Path, repo: Path = REPO, native: Path | None = None) -> Layer:
    """tfkube itself as a layer: `pip install --no-deps --target` of a copy of the checkout
    (this interpreter's pip builds the wheel) into Debian's dist-packages, its `tfkube`
    command in /usr/local/bin for the image's python3, and `native` (the native model
    server) there too. Seconds: no chroot, no TensorFlow."""
    src = tmp / "src"
    for path in _source_files(repo):
        target = src / path.relative_to(repo)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    root = tmp / "layer-root"
    site = root / SITE_PACKAGES
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore"}
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    _run([*pip, "--no-warn-script-location", "--target", str(site), str(src)], env=env)
    scripts = root / "usr" / "local" / "bin"
    scripts.mkdir(parents=True)
    for script in sorted((site / "bin").iterdir()):
        lines = script.read_text().splitlines(keepends=True)
        if lines and lines[0].startswith("#!"):  # pip wrote this interpreter's path
            lines[0] = "#!/usr/bin/python3\n"
        (scripts / script.name).write_text("".join(lines))
        (scripts / script.name).chmod(0o755)
    shutil.rmtree(site / "bin")
    if native is not None:
        shutil.copyfile(native, scripts / NATIVE_BINARY)
        (scripts / NATIVE_BINARY).chmod(0o755)
    tar = tmp / "tfkube.tar"
    _run(
        ["tar", "--numeric-owner", "--owner=0", "--group=0", "--sort=name",
         "-C", str(root), "-cf", str(tar), "."]
    )  # fmt: skip
    return Layer(tar)


def build_tfkube(image: Image, tensorflow: Image, source: Path = REPO) -> None:
    """tfkube's image: the TensorFlow image's layer, the dependency layer (this
    checkout's), tfkube's own (of `source`: this checkout, or the tree `tfkube_image` was
    given)."""
    with _locked(image.root):
        if image.present():
            return
        if not tensorflow.present():
            raise ImageError(
                f"{tensorflow.name} is not built: run `python3 {HERE}/images.py build`"
            )
        t0 = time.monotonic()
        deps = deps_layer(tensorflow)
        _log(f"{image.name}: building tfkube's own layer")
        tmp = Path(tempfile.mkdtemp(prefix=".build-tfkube-", dir=image.root))
        try:
            own = source_layer(tmp, source, image.native)
            config = {
                "Env": [f"{k}={v}" for k, v in TFKUBE["env"].items()],  # type: ignore[attr-defined]
                "User": TFKUBE["user"],
                "Cmd": TFKUBE["cmd"],
                "WorkingDir": "/",
            }
            _finish(image, tmp, [*layers_of(tensorflow), deps, own], config, t0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def deps_cached(tensorflow: Image, repo: Path = REPO) -> bool:
    """Whether tfkube's image can be built in seconds (its dependency layer is there)."""
    key = deps_key(tensorflow, repo)[:16]
    folder = tensorflow.root / "layers"
    return (folder / f"tfkube-deps-{key}.tar").is_file() and (
        folder / f"tfkube-deps-{key}.sha256"
    ).is_file()


def _unmount_all(mounts: list[Path]) -> None:
    while mounts:
        target = mounts.pop()
        subprocess.run(["umount", "-R", "-l", str(target)], check=False, capture_output=True)


# --------------------------------------------------------------------------- import


def stored_blobs(ctr: list[str], timeout: float = 60.0) -> set[str]:
    """The blobs (hex SHA-256) the containerd behind `ctr` already has in its content store."""
    proc = subprocess.run(
        [*ctr, "content", "ls", "-q"], capture_output=True, text=True, timeout=timeout, check=True
    )
    return {d.removeprefix("sha256:") for d in proc.stdout.split() if d.startswith("sha256:")}


def import_images(
    ctr: list[str], found: list[Image], timeout: float = 900.0, have: set[str] | None = None
) -> None:
    """Stream the OCI layouts as one tar (GNU tar, no archive on disk) into `ctr images
    import -`: one index naming every image, each blob once (tfkube's image shares the
    TensorFlow image's layer, so importing both costs little more than TensorFlow alone).
    `have`: blobs the store already holds (`stored_blobs`), left out of the stream:
    containerd reads an image's manifests and config from the stream or the store alike,
    and a layer it already has unpacked is not unpacked again (an image built on the
    TensorFlow layer, imported after it, then streams only its own layer)."""
    for image in found:
        if not image.present():
            raise ImageError(f"{image.name} is not built: run `python3 tools/kube/images.py build`")
    manifests: list[object] = []
    members: list[str] = []
    seen: set[str] = set(have or ())
    for image in found:
        manifests += json.loads((image.layout / "index.json").read_text())["manifests"]
        blobs = [
            f"blobs/sha256/{b.name}"
            for b in sorted((image.layout / "blobs" / "sha256").iterdir())
            if b.name not in seen
        ]
        seen.update(b.rsplit("/", 1)[1] for b in blobs)
        if blobs:
            members += ["-C", str(image.layout), *blobs]
    with tempfile.TemporaryDirectory(prefix="tfkube-import-") as tmp:
        index = {"schemaVersion": 2, "manifests": manifests}
        (Path(tmp) / "index.json").write_text(json.dumps(index, indent=2) + "\n")
        (Path(tmp) / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}\n')
        argv = ["tar", "--hard-dereference", "-cf", "-", "-C", tmp, "oci-layout", "index.json"]
        with subprocess.Popen([*argv, *members], stdout=subprocess.PIPE) as tar:
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
        names = ", ".join(i.name for i in found)
        raise ImageError(f"importing {names} failed ({proc.returncode}): {out[-2000:]}")


def import_image(
    ctr: list[str], image: Image, timeout: float = 900.0, have: set[str] | None = None
) -> None:
    import_images(ctr, [image], timeout, have)


# --------------------------------------------------------------------------- CLI


def images(bin_dir: Path) -> list[Image]:
    """pause, TensorFlow, tfkube's, PostgreSQL's."""
    tensorflow = tensorflow_image()
    return [
        pause_image(bin_dir / "tfkube-pause"),
        tensorflow,
        tfkube_image(tensorflow, native=native_model_server()),
        postgres_image(),
    ]


def default_bin_dir() -> Path:
    out = subprocess.run(
        ["bash", str(HERE / "build.sh"), "--print-bin-dir"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def build_all(bin_dir: Path) -> list[Image]:
    native_model_server(build=True)
    pause, tf, own, postgres = images(bin_dir)
    if not pause.present():
        build_pause(pause, bin_dir / "tfkube-pause")
    if not tf.present():
        build_tensorflow(tf)
    if not own.present():
        build_tfkube(own, tf)
    if not postgres.present():
        build_postgres(postgres)
    return [pause, tf, own, postgres]


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
