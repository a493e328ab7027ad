"""Rendering: golden manifests per case, and the contracts other parts rely on.

Golden files: ``tests/golden/<case>/inferenceserver.yaml`` -> ``expected.yaml`` (Deployment, Service,
PodMonitor for attempt 1 of the planner's configuration). Regenerate only on purpose:
``CTXFIT_UPDATE_GOLDEN=1 pytest tests/unit/render/test_render.py``.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
import yaml
from ctxfit.api import InferenceServer
from ctxfit.render import (
    RenderInput,
    render_deployment,
    render_pod_monitor,
    render_pod_template,
    render_service,
    template_hash,
)

from tests.unit.render.renderkit import CASES, GOLDEN, UID, render_input


def render_all(inp: RenderInput) -> list[dict[str, Any]]:
    return [render_deployment(inp), render_service(inp), render_pod_monitor(inp)]


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    docs = render_all(render_input(case))
    expected = GOLDEN / case / "expected.yaml"
    text = yaml.safe_dump_all(docs, sort_keys=False, width=120)
    if os.environ.get("CTXFIT_UPDATE_GOLDEN") == "1":
        expected.write_text(text)
    assert expected.exists(), f"missing {expected}: run with CTXFIT_UPDATE_GOLDEN=1"
    assert list(yaml.safe_load_all(expected.read_text())) == docs


def test_render_is_deterministic() -> None:
    assert render_all(render_input("kimi-128k")) == render_all(render_input("kimi-128k"))


def test_vllm_flags_probes_and_resources() -> None:
    deployment = render_deployment(render_input("kimi-128k"))
    spec = deployment["spec"]
    container = spec["template"]["spec"]["containers"][0]
    args = " ".join(container["args"])
    for flag in ("--max-model-len 131072", "--tensor-parallel-size 8", "--gpu-memory-utilization 0.95"):
        assert flag in args
    assert container["args"][-1] == "--trust-remote-code", "user args come last"
    assert container["command"] == ["vllm", "serve"]
    assert spec["strategy"] == {"type": "Recreate"}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert spec["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    shm = spec["template"]["spec"]["volumes"][0]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == UID


@pytest.mark.parametrize("timeout", [30, 31, 523, 896, 1800, 7 * 24 * 3600])
def test_startup_probe_budget_covers_the_timeout(timeout: int) -> None:
    probe = render_deployment(render_input("kimi-128k", startup_timeout_seconds=timeout))[
        "spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    budget = probe["failureThreshold"] * probe["periodSeconds"]
    assert timeout <= budget < timeout + probe["periodSeconds"]
    assert probe["failureThreshold"] == math.ceil(timeout / probe["periodSeconds"])


def test_sglang_flags_and_port() -> None:
    container = render_pod_template(render_input("dsv4-flash-512k"))["spec"]["containers"][0]
    args = " ".join(container["args"])
    assert "--context-length 524288" in args and "--enable-metrics" in args
    assert "--cuda-graph-max-bs-decode 32" in args
    assert container["ports"] == [{"name": "http", "containerPort": 30001, "protocol": "TCP"}]


def test_labels_and_annotations_contract() -> None:
    inp = render_input("passthrough", attempt=3)
    template = render_pod_template(inp)
    labels, annotations = template["metadata"]["labels"], template["metadata"]["annotations"]
    assert labels["app.kubernetes.io/name"] == "vllm", "ctxfit's labels win over the user's"
    assert labels["team"] == "search"
    for key, value in {"app.kubernetes.io/instance": "llama-8b", "app.kubernetes.io/component": "inference-server",
                       "app.kubernetes.io/managed-by": "ctxfit", "ctxfit.io/server": "llama-8b",
                       "ctxfit.io/engine": "vllm"}.items():
        assert labels[key] == value
    assert annotations["ctxfit.io/context-length"] == "32768", "ctxfit's annotations win over the user's"
    assert annotations["ctxfit.io/attempt"] == "3"
    assert annotations["prometheus.io/scrape"] == "true"
    for key in ("gpu-memory-utilization", "kv-cache-dtype", "max-num-seqs", "cuda-graph-max-bs",
                "memory-limit-bytes", "shm-bytes", "startup-timeout-seconds"):
        assert f"ctxfit.io/{key}" in annotations
    assert int(annotations["ctxfit.io/memory-limit-bytes"]) == inp.effective.memory_limit_bytes
    assert "ctxfit.io/mem-fraction-static" not in annotations


def test_env_passthrough_keeps_secret_refs_and_order() -> None:
    container = render_pod_template(render_input("passthrough"))["spec"]["containers"][0]
    assert container["env"] == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
        {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
    ]
    assert container["image"] == "registry.example.com/vllm-openai:v0.20.0-patched"


@pytest.mark.parametrize(("spec_image", "operator_image", "expected"), [
    (None, None, "vllm/vllm-openai:v0.11.0"),
    (None, "mirror.local/vllm:v0.11.0", "mirror.local/vllm:v0.11.0"),
    ("mine:1", "mirror.local/vllm:v0.11.0", "mine:1"),
])
def test_image_precedence(spec_image: str | None, operator_image: str | None, expected: str) -> None:
    inp = render_input("kimi-128k", image=operator_image)
    if spec_image:
        inp.spec.engine.image = spec_image
    assert render_pod_template(inp)["spec"]["containers"][0]["image"] == expected


def test_hash_tracks_the_template_only() -> None:
    base = render_deployment(render_input("kimi-128k"))
    same = render_deployment(render_input("kimi-128k", replicas=0))
    smaller = render_deployment(render_input("kimi-128k", context_length=65536))
    key = "ctxfit.io/pod-template-hash"
    assert base["metadata"]["annotations"][key] == template_hash(base["spec"]["template"])
    assert same["metadata"]["annotations"][key] == base["metadata"]["annotations"][key]
    assert same["spec"]["replicas"] == 0
    assert smaller["metadata"]["annotations"][key] != base["metadata"]["annotations"][key]


def test_service_and_pod_monitor() -> None:
    inp = render_input("dsv4-flash-512k")
    service = render_service(inp)
    assert service["spec"]["selector"] == {"ctxfit.io/server": "dsv4-flash"}
    assert service["spec"]["ports"][0] == {"name": "http", "port": 30001, "targetPort": "http", "protocol": "TCP"}
    monitor = render_pod_monitor(inp)
    assert monitor["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"


def test_download_container_gets_the_users_hub_env_but_never_offline() -> None:
    """HF_ENDPOINT (a mirror) in spec.engine.env reaches model-download too; HF_HUB_OFFLINE (which would stop the
    download) and HF_HOME (the cache mount's) stay the operator's; non-Hub env stays on the engine."""
    from ctxfit.api.model_cache import CacheMode
    from ctxfit.render.cache import CacheVolume, download_container

    server = InferenceServer.model_validate(yaml.safe_load("""
apiVersion: ctxfit.io/v1alpha1
kind: InferenceServer
metadata: {name: s}
spec:
  model: {name: meta-llama/Llama-3.1-8B-Instruct}
  engine:
    kind: vllm
    env:
    - {name: HF_ENDPOINT, value: "http://10.251.0.1:8080"}
    - {name: HF_HUB_OFFLINE, value: "0"}
    - {name: HF_HOME, value: /elsewhere}
    - {name: VLLM_LOGGING_LEVEL, value: DEBUG}
  gpu: {count: 1, product: NVIDIA-L4}
"""))
    cache = CacheVolume(mode=CacheMode.VOLUME_CLAIM_TEMPLATE, claim_name="c")
    container = download_container(server.spec, "img", cache)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HF_ENDPOINT"] == "http://10.251.0.1:8080"
    assert env["HF_HOME"] == "/models" and "HF_HUB_OFFLINE" not in env and "VLLM_LOGGING_LEVEL" not in env
    assert [e["name"] for e in container["env"]].count("HF_HOME") == 1
