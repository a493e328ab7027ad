"""KEDA ``ScaledObject`` (``keda.sh/v1alpha1``) for an InferenceServer with ``spec.autoscaling`` (pure).

Shape (KEDA ScaledObject specification, https://keda.sh/docs/2.20/reference/scaledobject-spec/):

- ``scaleTargetRef``: the server's workload, named like the server: ``apps/v1`` Deployment, or the
  ``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet of a multi-node server (``spec.nodes`` > 1). KEDA scales
  any target with a ``scale`` subresource; LWS has one (sigs.k8s.io/lws
  ``api/leaderworkerset/v1/leaderworkerset_types.go``: ``+kubebuilder:subresource:scale`` with
  ``specpath=.spec.replicas``, ``statuspath=.status.replicas``, ``selectorpath=.status.hpaPodSelector``,
  the selector picking the leader pods only), so one replica is one group of ``spec.nodes`` pods.
- ``minReplicaCount`` / ``maxReplicaCount`` from ``spec.autoscaling`` (KEDA's own default minimum is 0, so
  both are always written). ``cooldownPeriod`` (KEDA: idle time before scaling to zero) and the HPA's
  ``behavior.scaleDown.stabilizationWindowSeconds`` (the HPA keeps the highest recommendation of that
  window before removing replicas) are both ``scaleDownDelaySeconds``. With ``scaleToZero``,
  ``initialCooldownPeriod`` is the server's startup budget plus that delay, so a new server is not taken to
  zero before it could ever have loaded.
- Two ``prometheus`` triggers (KEDA Prometheus scaler, https://keda.sh/docs/2.20/scalers/prometheus/:
  ``serverAddress``, ``query``, ``threshold``), ``metricType: AverageValue``: the query is the sum over the
  server's replicas, the threshold is per replica, and the HPA wants ``ceil(sum / threshold)`` replicas
  (thresholds: ``ctxfit.budget.autoscale``). Queries select the engine series by the labels the chart's
  PodMonitor gives them (charts/ctxfit/templates/podmonitor.yaml: ``namespace`` and ``server`` =
  the pod label ``ctxfit.io/server``). Metric names are the engine's (``Engine.kv_usage_metrics``,
  ``Engine.waiting_metric``); when an engine has used several names across versions, the series are
  joined with ``or`` (one series per pod and engine index: the newer name when a version exports both,
  e.g. vLLM 0.9.2-0.10), so every version is covered, even a mix during a rollout.
- Each data-parallel engine in a pod exports its own series (vLLM labels them ``engine``; SGLang exports
  one per DP rank from its TP-0 scheduler unless ``--enable-metrics-for-all-schedulers``), each with its own
  KV pool: the KV-usage sum is divided by ``parallelism.data`` so that it counts replicas, not pools.
- ``paused``: the annotation ``autoscaling.keda.sh/paused: "true"`` (KEDA 2.20: the scale loop stops and
  the HPA is deleted, replicas stay where they are; KEDA ``controllers/keda/scaledobject_controller.go``).
  Not paused, the annotation is ``"false"`` (KEDA ``apis/keda/v1alpha1/scaledobject_types.go``
  ``NeedToBePausedByAnnotation`` parses it with ``strconv.ParseBool``), so one patch of the rendered object
  both pauses and resumes.
- Owned by the InferenceServer (garbage-collected with it), labelled like the other rendered objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxfit.api import API_GROUP, API_VERSION, KIND, EngineKind, InferenceServerSpec
from ctxfit.budget.autoscale import Thresholds
from ctxfit.engines import get_engine

from .labels import common_labels, owner_reference
from .leaderworkerset import LWS_API_VERSION, LWS_KIND

KEDA_API_VERSION = "keda.sh/v1alpha1"
SCALED_OBJECT_KIND = "ScaledObject"
SCALED_OBJECT_PLURAL = "scaledobjects"
PAUSED_ANNOTATION = "autoscaling.keda.sh/paused"
NAMESPACE_METRIC_LABEL = "namespace"
SERVER_METRIC_LABEL = "server"
"""The labels the chart's PodMonitor puts on engine series (charts/ctxfit/templates/podmonitor.yaml)."""
KV_TRIGGER = "kv-cache-usage"
QUEUE_TRIGGER = "requests-waiting"
POLLING_INTERVAL_SECONDS = 15
"""How often KEDA itself polls the triggers (activation to and from zero); the HPA syncs every 15 s too."""


def hpa_name(name: str) -> str:
    """The HPA KEDA creates for ScaledObject ``name`` (KEDA's default: ``keda-hpa-NAME``)."""
    return f"keda-hpa-{name}"


@dataclass(frozen=True)
class ScaledObjectInput:
    """Everything the ScaledObject renderer reads.

    Attributes:
        name, namespace, uid: the InferenceServer's identity (uid for the ownerReference).
        spec: its validated spec; ``spec.autoscaling`` must be set.
        thresholds: ``ctxfit.budget.autoscale.thresholds`` for the server (per replica).
        prometheus_address: Prometheus base URL KEDA queries (operator setting ``CTXFIT_PROMETHEUS_ADDRESS``).
        paused: render the ``autoscaling.keda.sh/paused`` annotation (e.g. while the server is Failed).
        startup_timeout_seconds: the server's startup budget (``effective.startupTimeoutSeconds``), used for
            ``initialCooldownPeriod`` with scale to zero; None leaves KEDA's default (0).
    """

    name: str
    namespace: str
    uid: str
    spec: InferenceServerSpec
    thresholds: Thresholds
    prometheus_address: str
    paused: bool = False
    startup_timeout_seconds: int | None = None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def series_selector(namespace: str, name: str) -> str:
    """``{namespace="NS",server="NAME"}``: the engine series of one server."""
    return f'{{{NAMESPACE_METRIC_LABEL}="{_escape(namespace)}",{SERVER_METRIC_LABEL}="{_escape(name)}"}}'


def _sum_of(metrics: tuple[str, ...], selector: str) -> str:
    return "sum(" + " or ".join(f"{metric}{selector}" for metric in metrics) + ")"


def kv_usage_query(engine: EngineKind, namespace: str, name: str, data_parallel: int = 1) -> str:
    """PromQL: the server's KV-cache usage summed over its replicas (each replica counts up to 1)."""
    query = _sum_of(get_engine(engine).kv_usage_metrics, series_selector(namespace, name))
    return f"{query} / {data_parallel}" if data_parallel > 1 else query


def waiting_query(engine: EngineKind, namespace: str, name: str) -> str:
    """PromQL: requests waiting in the server's queues, summed over its replicas and engines."""
    return _sum_of((get_engine(engine).waiting_metric,), series_selector(namespace, name))


def threshold_text(value: float) -> str:
    """A trigger threshold as KEDA reads it (a decimal string; 4 significant digits)."""
    return f"{value:.4g}"


def scale_target_ref(spec: InferenceServerSpec, name: str) -> dict[str, str]:
    """The workload KEDA scales: the Deployment, or the LeaderWorkerSet when ``spec.nodes`` > 1."""
    if spec.nodes > 1:
        return {"apiVersion": LWS_API_VERSION, "kind": LWS_KIND, "name": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}


def _trigger(name: str, address: str, query: str, threshold: str) -> dict[str, Any]:
    return {"type": "prometheus", "name": name, "metricType": "AverageValue",
            "metadata": {"serverAddress": address, "query": query, "threshold": threshold}}


def render_scaled_object(inp: ScaledObjectInput) -> dict[str, Any]:
    """The server's ScaledObject, named like the server (module docstring for every field).

    Raises:
        ValueError: ``spec.autoscaling`` is not set, or the Prometheus address is empty.
    """
    scaling = inp.spec.autoscaling
    if scaling is None:
        raise ValueError("spec.autoscaling: not set; nothing to render")
    if not inp.prometheus_address:
        raise ValueError("prometheus address: empty; KEDA needs it for the triggers")
    kind = inp.spec.engine.kind
    delay = scaling.scale_down_delay_seconds
    metadata: dict[str, Any] = {
        "name": inp.name,
        "namespace": inp.namespace,
        "labels": common_labels(inp.name, kind),
        "ownerReferences": [owner_reference(f"{API_GROUP}/{API_VERSION}", KIND, inp.name, inp.uid)],
        "annotations": {PAUSED_ANNOTATION: "true" if inp.paused else "false"},
    }
    spec: dict[str, Any] = {
        "scaleTargetRef": scale_target_ref(inp.spec, inp.name),
        "pollingInterval": POLLING_INTERVAL_SECONDS,
        "cooldownPeriod": delay,
        "minReplicaCount": scaling.min_replicas,
        "maxReplicaCount": scaling.max_replicas,
    }
    if scaling.min_replicas == 0 and inp.startup_timeout_seconds is not None:
        spec["initialCooldownPeriod"] = inp.startup_timeout_seconds + delay
    spec["advanced"] = {
        "restoreToOriginalReplicaCount": False,
        "horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": delay}}},
    }
    found = inp.thresholds
    spec["triggers"] = [
        _trigger(KV_TRIGGER, inp.prometheus_address,
                 kv_usage_query(kind, inp.namespace, inp.name, inp.spec.parallelism.data),
                 threshold_text(found.kv_usage_fraction)),
        _trigger(QUEUE_TRIGGER, inp.prometheus_address, waiting_query(kind, inp.namespace, inp.name),
                 str(found.queue)),
    ]
    return {"apiVersion": KEDA_API_VERSION, "kind": SCALED_OBJECT_KIND, "metadata": metadata, "spec": spec}
