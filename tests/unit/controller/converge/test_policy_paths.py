"""Every spec path that can bring a Secret, a host path, a privileged setting or a node choice
into a pod is covered by its policy setting (``controller/converge/policy.py``), field by field.

``PATHS`` lists each such path with a spec that uses it, the setting that must refuse it, and the setting that
allows it again. ``test_every_path_into_the_pod_is_listed`` renders each spec and checks that what reaches the
pod (Secrets, host paths, annotations, node selection) is exactly what ``PATHS`` covers: a new spec field that
brings one of these into the pod without a policy fails it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.api.model_cache import CacheMode
from ctxfit.controller.converge.policy import host_path_refusal, refusal
from ctxfit.controller.settings import Settings
from ctxfit.render import render_deployment
from ctxfit.render.cache import CacheVolume, resolve_cache

from tests.unit.render.renderkit import render_input

BASE: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "weightsPerGPU": "16Gi"},
    "engine": {"kind": "vllm"},
    "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"},
    "context": {"target": 32768},
}


def spec_with(path: str, value: Any) -> InferenceServerSpec:
    body = copy.deepcopy(BASE)
    cur = body
    keys = path.split(".")
    for key in keys[:-1]:
        cur = cur.setdefault(key, {})
    cur[keys[-1]] = value
    return InferenceServerSpec.model_validate(body)


def settings(**kw: Any) -> Settings:
    return Settings(metrics_port=0, health_port=0, **kw)


SECRET_ENV = [{"name": "LOOT", "valueFrom": {"secretKeyRef": {"name": "db-pass", "key": "password"}}}]
PATHS: dict[str, tuple[str, Any, dict[str, Any], dict[str, Any], str]] = {
    # case: (spec path, value, settings that refuse, settings that allow again, words of the refusal)
    "env-secret": ("engine.env", SECRET_ENV, {"allow_secret_env": False},
                   {"allow_secret_env": False, "allowed_secrets": ("db-pass",)}, "engine.env LOOT"),
    "token-secret": ("model.tokenSecretRef", {"name": "db-pass", "key": "password"}, {"allow_secret_env": False},
                     {"allow_secret_env": False, "allowed_secrets": ("db-pass",)}, "model.tokenSecretRef"),
    "host-path-root": ("model.cache", {"hostPath": {"path": "/"}}, {},
                       {"allowed_host_path_prefixes": ("/",)}, "system directory"),
    "host-path-etc": ("model.cache", {"hostPath": {"path": "/etc/kubernetes"}}, {},
                      {"allowed_host_path_prefixes": ("/etc/kubernetes",)}, "system directory"),
    "host-path-kubelet": ("model.cache", {"hostPath": {"path": "/var/lib/kubelet/pods"}}, {},
                          {"allowed_host_path_prefixes": ("/var/lib/kubelet",)}, "system directory"),
    "host-path-slashes": ("model.cache", {"hostPath": {"path": "//etc//"}}, {},
                          {"allowed_host_path_prefixes": ("/etc",)}, "system directory"),
    "host-path-off": ("model.cache", {"hostPath": {"path": "/mnt/models"}}, {"allow_host_path": False},
                      {"allow_host_path": True}, "host paths are not allowed"),
    "host-path-prefix": ("model.cache", {"hostPath": {"path": "/mnt/other"}},
                         {"allowed_host_path_prefixes": ("/mnt/models",)},
                         {"allowed_host_path_prefixes": ("/mnt/models", "/mnt/other")}, "not under an allowed prefix"),
    "apparmor": ("pod", {"annotations": {"container.apparmor.security.beta.kubernetes.io/engine": "unconfined"}},
                 {}, {"allow_security_annotations": True}, "isolation"),
    "seccomp": ("pod", {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}, {},
                {"allow_security_annotations": True}, "isolation"),
    "crio-devices": ("pod", {"annotations": {"io.kubernetes.cri-o.Devices": "/dev/mem"}}, {},
                     {"allow_security_annotations": True}, "isolation"),
    "wildcard-toleration": ("pod", {"tolerations": [{"operator": "Exists"}]}, {"allow_wildcard_tolerations": False},
                            {"allow_wildcard_tolerations": True}, "without a key"),
    "toleration-key": ("pod", {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]},
                       {"allowed_toleration_keys": ("dedicated",)},
                       {"allowed_toleration_keys": ("node-role.kubernetes.io/control-plane",)}, "is not allowed"),
    "gpu-product": ("gpu", {"count": 1, "product": "NVIDIA-B200"},
                    {"allowed_gpu_products": ("NVIDIA-H100-80GB-HBM3",)},
                    {"allowed_gpu_products": ("NVIDIA-B200",)}, "gpu.product"),
    "gpu-any": ("gpu", {"count": 1}, {"allowed_gpu_products": ("NVIDIA-H100-80GB-HBM3",)}, {}, "must be set"),
    "image": ("engine", {"kind": "vllm", "image": "registry.example/any:latest"},
              {"allowed_image_prefixes": ("vllm/",)}, {"allowed_image_prefixes": ("registry.example/",)},
              "not under an allowed prefix"),
}


@pytest.mark.parametrize("case", list(PATHS), ids=list(PATHS))
def test_each_path_is_refused_by_its_setting_and_allowed_by_its_exception(case: str) -> None:
    path, value, refuse, allow, words = PATHS[case]
    spec = spec_with(path, value)
    refused = refusal(spec, settings(**refuse))
    assert refused is not None and words in refused, refused
    assert refusal(spec, settings(**allow)) is None
    assert refusal(InferenceServerSpec.model_validate(BASE), settings(**refuse)) is None, "only this path"


@pytest.mark.parametrize("path", ["/mnt/models", "/data/hf", "/var/cache/ctxfit", "/scratch", "/models"])
def test_a_dedicated_cache_directory_is_allowed_by_default(path: str) -> None:
    assert host_path_refusal(path, settings()) is None


@pytest.mark.parametrize("path", ["/", "/etc", "/var", "/var/lib", "/var/lib/kubelet/pods", "/proc/1", "/root/.ssh",
                                  "/var/run/docker.sock", "/run/containerd", "/sys/fs/cgroup", "/dev", "/usr/bin",
                                  "/tmp", "/home", "/models/../etc", "//", "/./etc"])
def test_system_directories_are_refused_by_default(path: str) -> None:
    refused = host_path_refusal(path, settings())
    assert refused is not None and "system directory" in refused


@pytest.mark.parametrize(("path", "value"), [
    ("model.cache", {"hostPath": {"path": "/models/../var/lib/kubelet"}}),
    ("model.cache", {"persistentVolumeClaim": {"claimName": "shared", "subPath": "../../etc"}}),
    ("model.cache", {"persistentVolumeClaim": {"claimName": "shared", "subPath": "/etc"}}),
    ("model.cache", {"persistentVolumeClaim": {"claimName": "Not_A_Claim"}}),
    ("model.tokenSecretRef", {"name": "Not_A_Secret"}),
    ("model.tokenSecretRef", {"name": "hf", "key": "a key"}),
])
def test_what_kubernetes_would_refuse_in_the_pod_is_refused_by_the_spec(path: str, value: Any) -> None:
    """A hostPath or subPath with ``..`` (core ``validatePathNoBacksteps``,
    ``validateLocalDescendingPath``), names that are not object names: refused before anything renders (the CRD
    carries the same rules: tests/e2e/test_faults_objects.py)."""
    with pytest.raises(ValueError):
        spec_with(path, value)


def test_ordinary_annotations_stay_allowed() -> None:
    spec = spec_with("pod", {"annotations": {"prometheus.io/scrape": "true", "team": "llm",
                                             "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}})
    assert refusal(spec, settings()) is None


def _what_reaches_the_pod(spec: InferenceServerSpec) -> dict[str, Any]:
    """Secrets, host paths, annotations and node selection of the pod rendered for ``spec``."""
    inp = replace(render_input("kimi-128k"), spec=spec, gpu_product=spec.gpu.product)
    if spec.model.cache is not None:
        cache, _, _ = resolve_cache(spec, server=inp.name, has_default_storage_class=True, checkpoint=None)
        inp = replace(inp, cache=cache)
    else:
        inp = replace(inp, cache=CacheVolume(CacheMode.VOLUME_CLAIM_TEMPLATE, claim_name="x-weights",
                                             size_bytes=1 << 30))
    pod = render_deployment(inp)["spec"]["template"]
    text = json.dumps(pod)
    containers = [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]
    return {
        "secrets": sorted({e["valueFrom"]["secretKeyRef"]["name"] for c in containers for e in c.get("env", [])
                           if "secretKeyRef" in (e.get("valueFrom") or {})} | ({"envFrom"} if "envFrom" in text
                                                                                else set())),
        "host_paths": sorted(v["hostPath"]["path"] for v in pod["spec"].get("volumes", []) if "hostPath" in v),
        "annotations": sorted(k for k in pod["metadata"].get("annotations", {}) if not k.startswith("ctxfit.io/")),
        "tolerations": pod["spec"].get("tolerations", []),
        "node": {k: v for k, v in pod["spec"].items() if k in ("nodeSelector", "nodeName", "affinity")},
        "privileged": [c.get("securityContext") for c in containers if c.get("securityContext")]
                      + ([pod["spec"]["securityContext"]] if pod["spec"].get("securityContext") else [])
                      + [k for k in ("hostNetwork", "hostPID", "hostIPC") if pod["spec"].get(k)],
    }


def test_every_path_into_the_pod_is_listed() -> None:
    """The base spec brings nothing of these into the pod but its GPU product; each listed path brings exactly
    its own; nothing in the spec renders a privilege (no securityContext, no host namespace)."""
    base = _what_reaches_the_pod(InferenceServerSpec.model_validate(BASE))
    assert base["secrets"] == [] and base["host_paths"] == [] and not base["privileged"]
    assert base["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert base["node"] == {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
    for case, (path, value, _, _, _) in PATHS.items():
        seen = _what_reaches_the_pod(spec_with(path, value))
        assert not seen["privileged"], (case, seen)
        if case in ("env-secret", "token-secret"):
            assert seen["secrets"] == ["db-pass"], (case, seen)
        elif case.startswith("host-path"):
            assert seen["host_paths"] == [value["hostPath"]["path"]], (case, seen)
        elif case in ("apparmor", "seccomp", "crio-devices"):
            assert seen["annotations"] == list(value["annotations"]), (case, seen)
        elif "toleration" in case:
            assert len(seen["tolerations"]) > len(base["tolerations"]), (case, seen)
        elif case.startswith("gpu"):
            assert seen["node"] != base["node"], (case, seen)
