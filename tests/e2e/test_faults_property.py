"""Every spec the CRD accepts either renders objects the API server accepts or ends
in a condition - never a silent retry loop.

Hypothesis draws specs around the edges of what Kubernetes validates (names, label and annotation keys
and values, env names and ``valueFrom``, tolerations, images, versions, pass-through args, quantities).
Each one is sent to the real harness API server as a server-side dry-run create of the InferenceServer.
For each one the CRD accepts, the operator's own pure reconcile (``controller.converge``, twice: the
Deployment pass and the Service pass, with the cluster's real GPU nodes) runs; every Deployment and
Service it wants to apply must pass a server-side dry-run create, and when it applies nothing the status
must carry a condition saying why.
"""

from __future__ import annotations

import json
import string
import uuid
from datetime import UTC, datetime
from typing import Any

from ctxfit.api.status import InferenceServerStatus
from ctxfit.controller.converge import Snapshot, converge
from ctxfit.controller.settings import Settings
from ctxfit.controller.views.pods import deployment_view, gpu_node
from ctxfit.vocab.kinds import Failure
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException

from .operator_kit import GROUP, PLURAL, VERSION, ServerClient, base

NAME_CHARS = string.ascii_lowercase + string.digits + "-."
KEY_CHARS = string.ascii_letters + string.digits + "-._/ ü"
VALUE_CHARS = string.ascii_letters + string.digits + "-._ ü$"
IMAGE_CHARS = string.ascii_letters + string.digits + "-._/:@ $"

names = st.one_of(st.text(NAME_CHARS, min_size=1, max_size=70),
                  st.from_regex(r"[a-z][-a-z0-9]{0,70}", fullmatch=True))
keys = st.one_of(st.text(KEY_CHARS, min_size=1, max_size=70),
                 st.sampled_from(["app", "team", "example.com/team", "a/b/c", "x" * 64, "-x", "x-", "/x"]))
values = st.one_of(st.text(VALUE_CHARS, max_size=70), st.sampled_from(["", "x" * 63, "x" * 64, "-x", "a.b"]))
env_names = st.one_of(st.text(string.ascii_letters + string.digits + "_-.= ", min_size=1, max_size=20),
                      st.sampled_from(["HF_TOKEN", "1X", "a.b", "-x", "X=Y"]))
value_from = st.one_of(
    st.builds(lambda n, k: {"secretKeyRef": {"name": n, "key": k}}, names, st.text(KEY_CHARS, min_size=1,
                                                                                    max_size=20)),
    st.builds(lambda p: {"fieldRef": {"fieldPath": p}},
              st.sampled_from(["metadata.name", "spec.nodeName", "status.podIP", "metadata.labels['a']",
                               "spec.containers", "metadata.labels['ünï']", "status.hostIPs"])),
    st.builds(lambda r: {"resourceFieldRef": {"resource": r}},
              st.sampled_from(["limits.cpu", "requests.memory", "limits.nvidia.com/gpu", "limits.hugepages-2Mi"])),
)
env = st.lists(st.one_of(st.builds(lambda n, v: {"name": n, "value": v}, env_names, st.text(max_size=10)),
                         st.builds(lambda n, f: {"name": n, "valueFrom": f}, env_names, value_from)), max_size=3)
tolerations = st.lists(st.fixed_dictionaries({}, optional={
    "key": keys, "operator": st.sampled_from(["Exists", "Equal"]), "value": values,
    "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
    "tolerationSeconds": st.integers(-10, 10**6)}), max_size=3)
images = st.one_of(st.text(IMAGE_CHARS, min_size=1, max_size=60),
                   st.sampled_from(["vllm/vllm-openai:v0.11.0", "Vllm/Up:tag", "reg.io:5000/a/b:c",
                                    "a@sha256:" + "f" * 64, "a:b:c", "localhost/x", "x:" + "t" * 129]))
versions = st.one_of(st.text(string.ascii_letters + string.digits + ".-+_$() ", min_size=1, max_size=20),
                     st.sampled_from(["0.11.0", "v0.5.4.post1", "1.2.3-rc.1", "1.2", "0.11.0+cu128"]))
args = st.lists(st.one_of(st.sampled_from(["--max-model-len", "--port=1", "--host", "-tp", "--enable-prefix-caching",
                                           "--tp", "--max_num_seqs", "--kv-cache-dtype=fp8", "--seed", "1"]),
                          st.text(max_size=12)), max_size=4)
quantities = st.one_of(st.sampled_from(["1", "500m", "1e30", "0", "0.0001", "4096", "4097", "1Ki", "64Ti", "1e3"]),
                       st.integers(-5, 10**6))


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    obj = base(draw(names))
    spec = obj["spec"]
    pod: dict[str, Any] = {}
    if draw(st.booleans()):
        pod["labels"] = draw(st.dictionaries(keys, values, max_size=3))
    if draw(st.booleans()):
        pod["annotations"] = draw(st.dictionaries(keys, st.text(max_size=10), max_size=2))
    if draw(st.booleans()):
        pod["tolerations"] = draw(tolerations)
    if pod:
        spec["pod"] = pod
    engine = spec["engine"]
    if draw(st.booleans()):
        engine["env"] = draw(env)
    if draw(st.booleans()):
        engine["image"] = draw(images)
    if draw(st.booleans()):
        engine["version"] = draw(versions)
    if draw(st.booleans()):
        engine["args"] = draw(args)
    if draw(st.booleans()):
        spec["resources"] = {"cpu": draw(quantities)}
    if draw(st.booleans()):
        spec["gpu"]["product"] = draw(st.sampled_from(["NVIDIA-H100-80GB-HBM3", "NVIDIA H100", "x" * 64, "-x"]))
    if draw(st.booleans()):
        pod.setdefault("annotations", {})["big"] = "x" * draw(st.sampled_from([10, 3072, 3073, 300000]))
        spec["pod"] = pod
    return obj


def _dry_run_create(api: ServerClient, obj: dict[str, Any]) -> ApiException | None:
    try:
        if obj["kind"] == "Deployment":
            api.apps.create_namespaced_deployment(api.namespace, obj, dry_run="All")
        elif obj["kind"] == "Service":
            api.core.create_namespaced_service(api.namespace, obj, dry_run="All")
        else:
            api.custom.create_namespaced_custom_object(GROUP, VERSION, api.namespace, PLURAL, obj, dry_run="All")
    except ApiException as exc:
        return exc
    return None


def _no_diagnosis(*_: Any) -> Failure:
    raise AssertionError("no pods exist in a dry run")


def test_specs_the_crd_accepts_render_accepted_objects_or_end_in_a_condition(api: ServerClient) -> None:
    nodes = tuple(gpu_node(api.core.api_client.sanitize_for_serialization(n)) for n in api.core.list_node().items)
    cfg = Settings()
    seen = {"accepted": 0, "refused": 0, "rendered": 0, "condition": 0}

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(specs())
    def check(obj: dict[str, Any]) -> None:
        refused = _dry_run_create(api, obj)
        if refused is not None:
            assert refused.status in (400, 422), refused.body  # admission, never a server error
            seen["refused"] += 1
            return
        seen["accepted"] += 1
        name = obj["metadata"]["name"]
        snap = Snapshot(name=name, namespace=api.namespace, uid=str(uuid.uuid4()), generation=1, spec=obj["spec"],
                        status=InferenceServerStatus(), nodes=nodes, pods=(), deployment=None, service_port=None,
                        now=datetime.now(UTC))
        first = converge(snap, cfg, _no_diagnosis)
        if first.deployment is None:
            conditions = {c.type.value: c for c in first.status.conditions}
            assert "Ready" in conditions and conditions["Ready"].status == "False", first.status
            assert conditions["Ready"].message, first.status
            seen["condition"] += 1
            return
        second = converge(Snapshot(**{**snap.__dict__, "status": first.status,
                                      "deployment": deployment_view(first.deployment)}), cfg, _no_diagnosis)
        assert second.service is not None
        for rendered in (first.deployment, second.service):
            problem = _dry_run_create(api, rendered)
            assert problem is None, (f"the CRD accepted {json.dumps(obj['spec'])[:600]} but the API server refuses "
                                     f"its {rendered['kind']}: {problem.body if problem else ''}")
        seen["rendered"] += 1

    check()
    print(f"property: {seen}")
    assert seen["accepted"] >= 10 and seen["refused"] >= 10, seen  # both sides of the line were exercised

