"""Service and PodMonitor for an InferenceServer (plain dicts; pure, deterministic).

The Service (ClusterIP) exposes the engine's OpenAI-compatible API on the ``http`` port; its URL is
``status.endpoint``. The PodMonitor (monitoring.coreos.com/v1) scrapes ``/metrics`` on the same port.
"""

from __future__ import annotations

from typing import Any

from ctxfit.api import API_GROUP, API_VERSION, KIND
from ctxfit.engines import get_engine

from .deployment import RenderInput, port_name
from .inferencepool import server_ports
from .labels import SERVER_LABEL, common_labels, owner_reference, selector_labels


def endpoint_url(name: str, namespace: str, port: int) -> str:
    """``http://NAME.NAMESPACE.svc:PORT``: the in-cluster base URL of the engine's API."""
    return f"http://{name}.{namespace}.svc:{port}"


def render_service(inp: RenderInput) -> dict[str, Any]:
    """ClusterIP Service NAME, port ``http`` -> the engine's ``http`` container port (and, when each data-parallel
    rank serves its own port, ``http-rankN`` -> that rank's port)."""
    ports = server_ports(inp.spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": inp.name,
            "namespace": inp.namespace,
            "labels": common_labels(inp.name, inp.spec.engine.kind),
            "ownerReferences": [owner_reference(f"{API_GROUP}/{API_VERSION}", KIND, inp.name, inp.uid)],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(inp.name),
            "ports": [{"name": port_name(rank), "port": port, "targetPort": port_name(rank), "protocol": "TCP"}
                      for rank, port in enumerate(ports)],
        },
    }


def render_pod_monitor(inp: RenderInput, scrape_interval: str = "30s") -> dict[str, Any]:
    """A per-server PodMonitor (for clusters without the chart's shared one)."""
    engine = get_engine(inp.spec.engine.kind)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": inp.name,
            "namespace": inp.namespace,
            "labels": common_labels(inp.name, inp.spec.engine.kind),
            "ownerReferences": [owner_reference(f"{API_GROUP}/{API_VERSION}", KIND, inp.name, inp.uid)],
        },
        "spec": {
            "selector": {"matchLabels": {SERVER_LABEL: inp.name}},
            "podMetricsEndpoints": [{"port": port_name(0), "path": engine.metrics_path, "interval": scrape_interval}],
        },
    }
