"""Container images the tests build and run: the operator image (hack/image.sh, the same script as `make image`)
and the container engine that builds and runs it (hack/container-engine.sh: docker with a daemon, else
podman; CONTAINERS_CONF as that script sets it).

``engine()`` -> Engine (name, environment); ``build_operator_image()`` -> the image name; ``Engine.run`` /
``Engine.inspect`` / ``Engine.save`` wrap the CLI. Only the standard library.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

HACK_DIR = Path(__file__).resolve().parent
REPO_DIR = HACK_DIR.parent
OPERATOR_IMAGE = "localhost/ctxfit:dev"
FAKE_ENGINE_IMAGE = "localhost/ctxfit-fake-engine:dev"


class ImageError(RuntimeError):
    """A build or an engine command failed; the message carries its output."""


@dataclass(frozen=True)
class Engine:
    name: str  # docker | podman | buildah
    env: dict[str, str]  # os.environ plus what container-engine.sh exported (CONTAINERS_CONF)

    def cmd(self, *args: str, check: bool = True, timeout: float = 300,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([self.name, *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                              input=input, check=False)
        if check and proc.returncode != 0:
            raise ImageError(f"`{self.name} {' '.join(args)}` exited {proc.returncode}:\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def run(self, image: str, *args: str, options: tuple[str, ...] = (), entrypoint: str | None = None,
            check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``<engine> run --rm [options] [--entrypoint E] image args`` (buildah: ``buildah run`` is not
        equivalent, so running needs docker or podman)."""
        if self.name == "buildah":
            raise ImageError("running an image needs docker or podman")
        ep = ("--entrypoint", entrypoint) if entrypoint is not None else ()
        return self.cmd("run", "--rm", *options, *ep, image, *args, check=check, timeout=timeout)

    def inspect(self, image: str) -> dict[str, Any]:
        """The image's config (User, Entrypoint, Env, ExposedPorts, ...), as docker and podman both report it."""
        out = json.loads(self.cmd("image", "inspect", image).stdout)
        config: dict[str, Any] = out[0]["Config"]
        return config

    def save(self, image: str, path: Path) -> Path:
        """A docker-archive tarball of the image (what `ctr images import` and `kind load image-archive` read)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        if self.name == "podman":
            self.cmd("save", "--format", "docker-archive", "-o", str(tmp), image, timeout=600)
        else:
            self.cmd("save", "-o", str(tmp), image, timeout=600)
        tmp.replace(path)
        return path

    def image_id(self, image: str) -> str:
        return self.cmd("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()


@cache
def engine() -> Engine:
    """The engine hack/container-engine.sh picks, with the environment it exports."""
    script = f'source {HACK_DIR / "container-engine.sh"} && echo "$ENGINE" && echo "${{CONTAINERS_CONF:-}}"'
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageError(proc.stderr.strip() or "no container engine")
    name, conf = ([*proc.stdout.splitlines(), "", ""])[:2]
    env = dict(os.environ)
    if conf:
        env["CONTAINERS_CONF"] = conf
    return Engine(name, env)


def build_script(script: str, env: dict[str, str] | None = None, timeout: float = 1800) -> str:
    """Run hack/<script> (nice'd builds inside) and return the last line of its stdout (the image name)."""
    proc = subprocess.run(["bash", str(HACK_DIR / script)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)
    if proc.returncode != 0:
        raise ImageError(f"hack/{script} exited {proc.returncode}:\n{proc.stderr[-5000:]}")
    return proc.stdout.strip().splitlines()[-1]


def build_operator_image(image: str = OPERATOR_IMAGE) -> str:
    """`make image`: the Dockerfile built by hack/image.sh (cached layers: seconds when nothing changed)."""
    return build_script("image.sh", {"IMAGE": image})


def build_fake_engine_image(image: str = FAKE_ENGINE_IMAGE) -> str:
    """hack/fake-engine (`make fake-engine-image`) on the same base as the operator image."""
    return build_script("image.sh", {"IMAGE": image, "DOCKERFILE": "hack/fake-engine/Containerfile",
                                     "CONTEXT": "hack"})


def write_docker_archive(path: Path, tag: str, files: dict[str, tuple[bytes, int]], config: dict[str, Any],
                         tree: Path | None = None) -> Path:
    """A one-layer image as a docker-archive tarball (``docker save`` format: manifest.json, the config, the layer),
    built without any engine: ``files`` maps a path in the image to (content, mode); ``tree``, a directory whose
    contents (files, directories, symlinks) come first, owned by root; ``config`` is the image's runtime config
    (Entrypoint, User, Env, ...). What `ctr images import` and `kind load image-archive` read.
    Deterministic: the same inputs give the same image ID."""
    import hashlib
    import io
    import tarfile

    def as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    def tar_bytes(entries: dict[str, tuple[bytes, int]], root: Path | None = None) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT if root else tarfile.USTAR_FORMAT) as tar:
            if root is not None:
                for entry in sorted(root.rglob("*")):
                    tar.add(entry, arcname=str(entry.relative_to(root)), recursive=False, filter=as_root)
            for name, (data, mode) in sorted(entries.items()):
                info = tarfile.TarInfo(name.lstrip("/"))
                info.size, info.mode, info.mtime = len(data), mode, 0
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    layer = tar_bytes(files, tree)
    diff_id = hashlib.sha256(layer).hexdigest()
    image_config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": "hack/images.py write_docker_archive"}],
    }, sort_keys=True).encode()
    config_id = hashlib.sha256(image_config).hexdigest()
    manifest = json.dumps([{"Config": f"{config_id}.json", "RepoTags": [tag],
                           "Layers": [f"{diff_id}/layer.tar"]}]).encode()
    archive = tar_bytes({f"{diff_id}/layer.tar": (layer, 0o644), f"{config_id}.json": (image_config, 0o644),
                         "manifest.json": (manifest, 0o644)})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(archive)
    tmp.replace(path)
    return path
