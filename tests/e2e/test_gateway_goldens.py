"""Every rendered InferencePool is valid against the real CRD (Gateway API Inference Extension v1.6.0, fetched by
hack/gateway-bins.sh): a server-side apply (dry run) of each golden pool (tests/golden/gateway/*/expected.yaml) and
of the pool of a shared pool, compared with what the API server would store, so the OpenAPI schema, pruning,
defaulting and the CRD's CEL rules all apply. The schema is shown to bite (so the test can fail), and the
README's Gateway + HTTPRoute example is valid against the Gateway API's own CRDs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from addons_gateway import INFERENCE_POOL_CRD, gateway_available, install_gateway_crds
from ctxfit.api import InferenceServer, InferenceServerSpec
from ctxfit.render.inferencepool import pool_input, render_inference_pool, server_ports

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "gateway"
README = Path(__file__).resolve().parents[2] / "README.md"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "expected.yaml").exists())


@pytest.fixture(scope="module")
def gateway_crds(cluster: Any) -> None:
    if not gateway_available(cluster):
        pytest.fail("Gateway API / InferencePool CRDs missing: run bash hack/k8s-bins.sh (make test does)")
    install_gateway_crds(cluster)


def _pools(case: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((GOLDEN / case / "expected.yaml").read_text())
            if d and d["kind"] == "InferencePool"]


def _apply(cluster: Any, obj: dict[str, Any], namespace: str) -> tuple[int, str, dict[str, Any] | None]:
    obj = json.loads(json.dumps(obj))
    obj["metadata"]["namespace"] = namespace
    proc = cluster.kubectl_proc("apply", "--server-side", "--field-manager=ctxfit-test", "--dry-run=server",
                                "-o", "json", "-f", "-", input=json.dumps(obj))
    return proc.returncode, proc.stderr, json.loads(proc.stdout) if proc.returncode == 0 else None


def test_every_creating_golden_has_a_pool() -> None:
    creating = [c for c in CASES if _pools(c)]
    assert len(creating) >= 6, creating


@pytest.mark.parametrize("case", [c for c in CASES if _pools(c)])
def test_golden_pool_applies_to_the_real_crd(cluster: Any, gateway_crds: None, namespace: str, case: str) -> None:
    (pool,) = _pools(case)
    code, err, stored = _apply(cluster, pool, namespace)
    assert code == 0, err
    assert stored is not None
    assert stored["apiVersion"] == "inference.networking.k8s.io/v1"
    assert stored["spec"] == pool["spec"], "the CRD pruned or defaulted a field: the operator would see drift"
    assert stored["metadata"]["annotations"] == pool["metadata"]["annotations"]
    assert stored["metadata"]["labels"] == pool["metadata"]["labels"]


def _spec(case: str) -> InferenceServerSpec:
    return InferenceServer.model_validate(yaml.safe_load((GOLDEN / case / "inferenceserver.yaml").read_text())).spec


def test_a_shared_pools_union_of_ports_applies(cluster: Any, gateway_crds: None, namespace: str) -> None:
    doc = render_inference_pool(pool_input("llama31-8b-h200", namespace, "00000000-0000-4000-8000-000000000026",
                                           _spec("vllm-single"), (server_ports(_spec("vllm-dp2")),)))
    code, err, stored = _apply(cluster, doc, namespace)
    assert code == 0, err
    assert stored is not None and [p["number"] for p in stored["spec"]["targetPorts"]] == [8000, 8001]


def test_the_schema_is_enforced(cluster: Any, gateway_crds: None, namespace: str) -> None:
    """The dry run refuses what the CRD refuses: duplicate ports (its CEL rule), more than 8, no selector."""
    (pool,) = _pools("vllm-single")
    dup = json.loads(json.dumps(pool))
    dup["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8000}]
    code, err, _ = _apply(cluster, dup, namespace)
    assert code != 0 and "port number must be unique" in err, err
    many = json.loads(json.dumps(pool))
    many["spec"]["targetPorts"] = [{"number": 8000 + i} for i in range(9)]
    code, err, _ = _apply(cluster, many, namespace)
    assert code != 0 and "must have at most 8 items" in err, err
    bad = json.loads(json.dumps(pool))
    bad["spec"]["endpointPickerRef"].pop("port")
    code, err, _ = _apply(cluster, bad, namespace)
    assert code != 0 and "port is required when kind is 'Service'" in err, err


def _readme_gateway_example() -> list[dict[str, Any]]:
    text = README.read_text()
    match = re.search(r"<!-- gateway-example -->\s*```yaml\n(.*?)```", text, re.DOTALL)
    assert match, "README has no gateway example block (<!-- gateway-example --> then a yaml fence)"
    return [d for d in yaml.safe_load_all(match.group(1)) if d]


def test_readme_gateway_and_route_are_valid(cluster: Any, gateway_crds: None, crd: Path, namespace: str) -> None:
    """The README's example (two InferenceServers of one model on two GPU products in one pool, a Gateway, an
    HTTPRoute to the pool) is accepted by the real CRDs: InferenceServers by ctxfit's, the rest by the Gateway
    API's and the InferencePool's."""
    docs = _readme_gateway_example()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["Gateway", "HTTPRoute", "InferenceServer", "InferenceServer"], kinds
    route = next(d for d in docs if d["kind"] == "HTTPRoute")
    refs = [ref for rule in route["spec"]["rules"] for ref in rule["backendRefs"]]
    servers = [d for d in docs if d["kind"] == "InferenceServer"]
    pools = {s["spec"]["routing"]["inferencePool"].get("create", {}).get("name")
             or s["spec"]["routing"]["inferencePool"].get("join", {}).get("name") for s in servers}
    assert len(pools) == 1 and refs == [{"group": "inference.networking.k8s.io", "kind": "InferencePool",
                                         "name": pools.pop()}], refs
    products = {s["spec"]["gpu"]["product"] for s in servers}
    assert len(products) == 2
    for doc in docs:
        code, err, _ = _apply(cluster, doc, namespace)
        assert code == 0, f"{doc['kind']} {doc['metadata']['name']}: {err}"
    assert INFERENCE_POOL_CRD
