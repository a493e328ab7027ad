"""On the real local control plane: a user who may create InferenceServers (the impersonated
``ctxfit-edit`` user, through ``edit``) names one after an object that already exists. The operator writes none of
it: ``ObjectsAccepted=False`` (reason ``ForeignObject``) names the object, one Warning Event, the object keeps its
resourceVersion, and nothing of the server claims to serve through it (docs/design/ownership.md).

Cases: Service ``billing`` (its traffic must not move to the user's pod), ``kubernetes`` in ``default``, a
same-named Deployment (never replaced, never scaled to zero when the server fails), a foreign PVC with the
weights claim's name (never mounted, grown or deleted), a same-named KEDA ScaledObject (never replaced, paused
or deleted).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from .operator_kit import OperatorProcess, ServerClient, base, bind, can_i, condition, kubectl

USER = "erin-editor"
SETTLE_SECONDS = 12.0
"""Long enough for the operator's passes, its 10 s and 20 s retries included, to have written anything they would."""


def as_user(cluster: Any, namespace: str, obj: dict[str, Any]) -> None:
    """Create ``obj`` as the impersonated user bound to ``edit`` (ctxfit-edit aggregates into it)."""
    out = kubectl(cluster, "create", "-f", "-", user=USER, namespace=namespace, input=json.dumps(obj))
    assert out.returncode == 0, out.stderr


@pytest.fixture
def editor(cluster: Any, user_roles: None, api: ServerClient) -> str:
    bind(cluster, api.namespace, USER, "edit")
    api.wait(lambda: can_i(cluster, USER, api.namespace, "create", "inferenceservers.ctxfit.io"), "aggregation")
    assert not can_i(cluster, USER, api.namespace, "update", "services", "billing"), "the user cannot edit it"
    return USER


def foreign_condition(api: ServerClient, name: str, label: str) -> dict[str, Any]:
    def reported() -> dict[str, Any] | None:
        try:
            cond = condition(api.get(name), "ObjectsAccepted")
        except KeyError:
            return None
        return cond if cond["status"] == "False" and cond["reason"] == "ForeignObject" else None

    cond: dict[str, Any] = api.wait(reported, f"ObjectsAccepted=False (ForeignObject) on {name}")
    assert label in cond["message"] and "not owned by this InferenceServer" in cond["message"], cond
    return cond


def one_event(api: ServerClient, name: str, label: str) -> None:
    found = [e for e in api.events(name) if e["reason"] == "ForeignObject"]
    assert len(found) == 1 and found[0]["type"] == "Warning" and label in found[0]["message"], api.events(name)


def billing_service(namespace: str) -> client.V1Service:
    return client.V1Service(
        metadata=client.V1ObjectMeta(name="billing", namespace=namespace, labels={"app": "billing"}),
        spec=client.V1ServiceSpec(selector={"app": "billing"}, ports=[client.V1ServicePort(port=8080,
                                                                                             target_port=8080)]))


def test_a_server_named_after_a_service_never_takes_its_traffic(cluster: Any, op: OperatorProcess,
                                                                 api: ServerClient, editor: str) -> None:
    before = api.core.create_namespaced_service(api.namespace, billing_service(api.namespace))
    as_user(cluster, api.namespace, base("billing"))
    foreign_condition(api, "billing", "Service billing")
    op.settle(SETTLE_SECONDS)
    after = api.core.read_namespaced_service("billing", api.namespace)
    assert after.metadata.resource_version == before.metadata.resource_version, "the Service was written"
    assert not written_by_ctxfit(after)
    assert after.spec.selector == {"app": "billing"} and after.spec.ports[0].port == 8080
    assert not after.metadata.owner_references
    server = api.get("billing")
    assert condition(server, "Ready")["status"] == "False" and "endpoint" not in server["status"]
    assert "Ready: attempt" not in op.log_path.read_text(), "never Ready through a Service that is not its own"
    assert server["status"].get("phase") != "Ready"
    one_event(api, "billing", "Service billing")
    assert "Traceback" not in op.log_path.read_text()


def test_a_server_named_kubernetes_in_default_leaves_the_api_service_alone(cluster: Any, crd: Path, user_roles: None,
                                                                           tmp_path: Path) -> None:
    default = ServerClient(Path(cluster.kubeconfig), "default", Path(cluster.bin_dir) / "kubectl")
    before = default.core.read_namespaced_service("kubernetes", "default")
    bind(cluster, "default", USER, "edit")
    operator = OperatorProcess(Path(cluster.kubeconfig), "default", tmp_path / "operator.log").start()
    try:
        default.wait(lambda: can_i(cluster, USER, "default", "create", "inferenceservers.ctxfit.io"), "aggregation")
        as_user(cluster, "default", base("kubernetes"))
        foreign_condition(default, "kubernetes", "Service kubernetes")
        operator.settle(SETTLE_SECONDS)
        assert "Ready: attempt" not in operator.log_path.read_text(), "never Ready through a Service not its own"
        after = default.core.read_namespaced_service("kubernetes", "default")
        assert after.metadata.resource_version == before.metadata.resource_version
        assert after.spec.selector is None and [p.port for p in after.spec.ports] == [443]
        one_event(default, "kubernetes", "Service kubernetes")
    finally:
        operator.stop()
        print(f"--- operator log ---\n{operator.log_path.read_text()[-4000:]}")
        _delete_server_and_its_own(default, "kubernetes")
        kubectl(cluster, "delete", "rolebinding", f"{USER}-edit", "-n", "default", "--ignore-not-found")


def _delete_server_and_its_own(api: ServerClient, name: str) -> None:
    """Delete the server and, directly, only the Deployment it owns (default is shared: nothing else)."""
    try:
        uid = api.get(name)["metadata"]["uid"]
        api.custom.delete_namespaced_custom_object("ctxfit.io", "v1alpha1", api.namespace, "inferenceservers", name)
    except ApiException:
        return
    try:
        deployment = api.apps.read_namespaced_deployment(name, api.namespace)
    except ApiException:
        return
    if any(ref.uid == uid for ref in deployment.metadata.owner_references or []):
        with contextlib.suppress(ApiException):  # the garbage collector may be first
            api.apps.delete_namespaced_deployment(name, api.namespace, propagation_policy="Foreground")


def foreign_deployment(namespace: str, name: str) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=labels),
        spec=client.V1DeploymentSpec(replicas=2, selector=client.V1LabelSelector(match_labels=labels),
                                     template=client.V1PodTemplateSpec(
                                         metadata=client.V1ObjectMeta(labels=labels),
                                         spec=client.V1PodSpec(containers=[client.V1Container(
                                             name="app", image="registry.example/billing:1")]))))


def written_by_ctxfit(obj: Any) -> list[str]:
    """Field managers of ``obj`` that are the operator (its field manager ``ctxfit``, its user agent)."""
    return [m.manager for m in obj.metadata.managed_fields or [] if str(m.manager).startswith("ctxfit")]


def test_a_same_named_deployment_is_never_replaced_or_scaled(cluster: Any, op: OperatorProcess, api: ServerClient,
                                                             editor: str) -> None:
    before = api.apps.create_namespaced_deployment(api.namespace, foreign_deployment(api.namespace, "llama"))
    as_user(cluster, api.namespace, base("llama"))
    foreign_condition(api, "llama", "Deployment llama")
    # the server then fails for good (a context that cannot fit): a Failed server scales its workload to 0, but
    # this one is not its workload
    api.patch_spec("llama", {"context": {"target": 100_000_000, "minimum": 100_000_000}})
    api.wait_phase("llama", "Failed")
    op.settle(SETTLE_SECONDS)
    after = api.apps.read_namespaced_deployment("llama", api.namespace)
    # its controller writes its status (resourceVersion moves); nobody but its creator writes its spec
    assert after.metadata.generation == before.metadata.generation, "the Deployment was written"
    assert not written_by_ctxfit(after)
    assert after.spec.replicas == 2 and after.spec.template.spec.containers[0].image == "registry.example/billing:1"
    assert not [e for e in api.events("llama") if e["reason"] == "ForeignObject"][1:], api.events("llama")


def test_a_foreign_claim_with_the_weights_name_is_never_mounted_grown_or_deleted(
        cluster: Any, op: OperatorProcess, api: ServerClient, editor: str) -> None:
    claim = api.core.create_namespaced_persistent_volume_claim(api.namespace, client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="llama-weights", namespace=api.namespace, labels={"team": "data"}),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}))))
    as_user(cluster, api.namespace, base("llama"))
    foreign_condition(api, "llama", "PersistentVolumeClaim llama-weights")
    op.settle(SETTLE_SECONDS)
    after = api.core.read_namespaced_persistent_volume_claim("llama-weights", api.namespace)
    assert after.metadata.uid == claim.metadata.uid and after.metadata.deletion_timestamp is None
    assert not written_by_ctxfit(after)
    assert after.spec.resources.requests["storage"] == "1Gi" and not after.metadata.owner_references
    assert api.deployment("llama", missing_ok=True) is None, "no pod may mount a claim that is not the server's"
    assert not api.pods("llama")
    one_event(api, "llama", "PersistentVolumeClaim llama-weights")


@pytest.fixture
def keda_crds(cluster: Any) -> None:
    """KEDA's CRDs only (the ScaledObject kind served; no KEDA operator needed to see who writes it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
    from addons_keda import _install_crds, keda_available

    assert keda_available(cluster), "KEDA's binaries and CRDs are built by hack/k8s-bins.sh"
    _install_crds(cluster)


@pytest.fixture
def keda_op(cluster: Any, crd: Path, namespace: str, tmp_path: Path, keda_crds: None) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log",
                               CTXFIT_KEDA_ENABLED="true", CTXFIT_PROMETHEUS_ADDRESS="http://prometheus.invalid:9090")
    yield operator.start()
    operator.stop()
    print(f"--- operator log ---\n{operator.log_path.read_text()[-6000:]}")


def test_a_same_named_scaled_object_is_never_replaced_paused_or_deleted(cluster: Any, keda_op: OperatorProcess,
                                                                        api: ServerClient, editor: str) -> None:
    theirs = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
              "metadata": {"name": "llama", "labels": {"team": "billing"}},
              "spec": {"scaleTargetRef": {"name": "billing-worker"}, "minReplicaCount": 2, "maxReplicaCount": 9,
                       "triggers": [{"type": "cpu", "metricType": "Utilization", "metadata": {"value": "50"}}]}}
    before = api.custom.create_namespaced_custom_object("keda.sh", "v1alpha1", api.namespace, "scaledobjects", theirs)
    obj = base("llama")
    obj["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2}
    as_user(cluster, api.namespace, obj)
    foreign_condition(api, "llama", "ScaledObject llama")
    api.patch_spec("llama", {"autoscaling": None})  # removed from the spec: a ScaledObject of the server's is deleted
    time.sleep(1)
    keda_op.settle(SETTLE_SECONDS)
    after = api.custom.get_namespaced_custom_object("keda.sh", "v1alpha1", api.namespace, "scaledobjects", "llama")
    # not resourceVersion: where KEDA's operator runs (the session's, once an autoscaling module installed it) it
    # writes this ScaledObject itself (status, its finalizer, its scaledobject.keda.sh/name label). What ctxfit
    # could write: spec (generation), labels and annotations other than KEDA's own, owners.
    def mine(meta: dict[str, Any], field: str) -> Any:
        value = meta.get(field)
        return {k: v for k, v in value.items() if not k.startswith("scaledobject.keda.sh/")} if isinstance(
            value, dict) else value

    for field in ("generation", "labels", "annotations", "ownerReferences", "uid"):
        assert mine(after["metadata"], field) == mine(before["metadata"], field), (field, after["metadata"])
    assert after["spec"] == before["spec"]
    assert after["spec"]["scaleTargetRef"] == {"name": "billing-worker"}
    assert "autoscaling.keda.sh/paused" not in (after["metadata"].get("annotations") or {})
