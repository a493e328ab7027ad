"""Operator-side policy: which images, tolerations and Secret references an InferenceServer may use.

Pure; the settings come from ``CTXFIT_*`` (``settings.py``, chart ``policy.*``). The permission model, every
setting, the spec paths covered and what a refused server does: docs/design/policy.md.
"""

from __future__ import annotations

import posixpath

from ctxfit.api import InferenceServerSpec
from ctxfit.render.deployment import engine_image

from ..settings import Settings

SYSTEM_PATHS = ("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc",
                "/root", "/run", "/sbin", "/srv", "/sys", "/usr", "/var", "/var/lib", "/var/lib/kubelet",
                "/var/lib/docker", "/var/lib/containerd", "/var/lib/etcd", "/var/log", "/var/run", "/tmp")
"""Directories a ``hostPath`` cache may not be (nor be above) when no prefixes are configured: the node's system,
its runtimes' and kubelet's state, where a container with write access would own the node."""
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/root", "/run", "/sbin",
                "/sys", "/usr", "/var/lib/kubelet", "/var/lib/docker", "/var/lib/containerd", "/var/lib/etcd",
                "/var/log", "/var/run")
"""Trees no ``hostPath`` cache may be inside either (e.g. ``/etc/x``, ``/var/lib/kubelet/pods``)."""
SECURITY_ANNOTATION_PREFIXES = ("container.apparmor.security.beta.kubernetes.io/",
                                "seccomp.security.alpha.kubernetes.io/",
                                "container.seccomp.security.alpha.kubernetes.io/", "io.kubernetes.cri-o.",
                                "io.kubernetes.cri.", "io.containerd.", "io.katacontainers.")
"""Pod annotations that change how a container is isolated: the AppArmor and seccomp annotations (honoured as
the fields by kube-apiserver/kubelet), CRI-O's and containerd's runtime-handler ``allowed_annotations`` (devices,
user namespaces, shm, cgroup options), Kata's."""


def _under(path: str, prefix: str) -> bool:
    prefix = posixpath.normpath(prefix)
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def host_path_refusal(path: str, settings: Settings) -> str | None:
    """Why ``model.cache.hostPath.path`` is refused, None when it is allowed (docs/design/policy.md)."""
    if not settings.allow_host_path:
        return "model.cache.hostPath: host paths are not allowed (use a claim)"
    normal = posixpath.normpath(path)
    if normal.startswith("//"):
        normal = "/" + normal.lstrip("/")
    prefixes = settings.allowed_host_path_prefixes
    if prefixes:
        if not any(_under(normal, prefix) for prefix in prefixes):
            return f"model.cache.hostPath {path!r} is not under an allowed prefix ({', '.join(prefixes)})"
        return None
    if normal in SYSTEM_PATHS or any(_under(normal, tree) for tree in SYSTEM_TREES):
        return f"model.cache.hostPath {path!r} is a system directory of the node (or inside one)"
    return None


def _secret_refusal(spec: InferenceServerSpec, settings: Settings) -> str | None:
    if settings.allow_secret_env:
        return None
    allowed = settings.allowed_secrets
    for var in spec.engine.env:
        ref = var.value_from.secret_key_ref if var.value_from is not None else None
        if ref is not None and ref.name not in allowed:
            return f"engine.env {var.name}: Secret references are not allowed (Secret {ref.name})"
    token = spec.model.token_secret_ref
    if token is not None and token.name not in allowed:
        return f"model.tokenSecretRef: Secret references are not allowed (Secret {token.name})"
    return None


def refusal(spec: InferenceServerSpec, settings: Settings) -> str | None:  # noqa: C901 - one check per spec path
    """The first policy violation of ``spec`` as one sentence, None when the spec is allowed."""
    image = engine_image(spec, settings.image_for(spec.engine.kind.value))
    prefixes = settings.allowed_image_prefixes
    if prefixes and not any(image.startswith(prefix) for prefix in prefixes):
        return f"engine image {image!r} is not under an allowed prefix ({', '.join(prefixes)})"
    for i, toleration in enumerate(spec.pod.tolerations):
        if not toleration.key and not settings.allow_wildcard_tolerations:
            return f"pod.tolerations[{i}]: a toleration without a key (tolerates every taint) is not allowed"
        allowed = settings.allowed_toleration_keys
        if allowed and toleration.key and toleration.key not in allowed:
            return f"pod.tolerations[{i}]: key {toleration.key!r} is not allowed ({', '.join(allowed)})"
    products = settings.allowed_gpu_products
    if products and spec.gpu.product is not None and spec.gpu.product not in products:
        return f"gpu.product {spec.gpu.product!r} is not allowed ({', '.join(products)})"
    if products and spec.gpu.product is None:
        return f"gpu.product must be set to one of {', '.join(products)} (any GPU product is not allowed)"
    secret = _secret_refusal(spec, settings)
    if secret is not None:
        return secret
    cache = spec.model.cache
    if cache is not None and cache.host_path is not None:
        problem = host_path_refusal(cache.host_path.path, settings)
        if problem is not None:
            return problem
    if not settings.allow_security_annotations:
        for key in spec.pod.annotations:
            if key.startswith(SECURITY_ANNOTATION_PREFIXES):
                return f"pod.annotations {key!r}: annotations that change a container's isolation are not allowed"
    return None
