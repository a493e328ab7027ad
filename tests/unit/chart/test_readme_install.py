"""README's "On a real cluster" steps and docs/first-server.md, checked against the real artifacts like the
plan output is: the image built is the image the helm command deploys, the CRD adoption commands name this
CRD, release and namespace, the node labels are those the operator reads, every phase is explained."""

from __future__ import annotations

import re

import pytest
import yaml
from ctxfit.api.crd import build_crd
from ctxfit.api.status import Phase, Reason
from ctxfit.controller.views import pods as observe
from ctxfit.render import deployment

from tests.unit.chart.chartkit import CHART, REPO, helm, one, run
from tests.unit.chart.readmekit import INSTALL, commands

FIRST = (REPO / "docs/first-server.md").read_text()


def _sets(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--set")


def test_the_image_built_and_pushed_is_the_image_installed() -> None:
    build = next(c for c in commands(INSTALL, "docker") if c[1] == "build")
    push = next(c for c in commands(INSTALL, "docker") if c[1] == "push")
    tag = build[build.index("-t") + 1]
    assert build[-1] == "." and (REPO / "Dockerfile").is_file()
    assert push[-1] == tag
    (install,) = [c for c in commands(INSTALL, "helm") if c[1] == "install"]
    sets = _sets(install)
    assert f"{sets['image.repository']}:{sets['image.tag']}" == tag
    release, chart = install[2], install[3]
    assert (REPO / chart).resolve() == CHART
    namespace = install[install.index("--namespace") + 1]
    out = run([helm(), "template", release, str(CHART), "--namespace", namespace,
               *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]]).stdout
    objs = [d for d in yaml.safe_load_all(out) if d]
    container = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == tag


def test_crd_adoption_names_this_crd_release_and_namespace() -> None:
    (install,) = [c for c in commands(INSTALL, "helm") if c[1] == "install"]
    release, namespace = install[2], install[install.index("--namespace") + 1]
    crd_name = build_crd()["metadata"]["name"]
    label, annotate = commands(INSTALL, "kubectl label"), commands(INSTALL, "kubectl annotate")
    assert label == [["kubectl", "label", "crd", crd_name, "app.kubernetes.io/managed-by=Helm", "--overwrite"]]
    assert annotate == [["kubectl", "annotate", "crd", crd_name, f"meta.helm.sh/release-name={release}",
                         f"meta.helm.sh/release-namespace={namespace}", "--overwrite"]]
    assert "--set crds.enabled=false" in INSTALL
    text = run([helm(), "template", release, str(CHART), "--set", "crds.enabled=false"]).stdout
    objs = [d for d in yaml.safe_load_all(text) if d]
    assert not [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    crd_file = "crds/inferenceservers.ctxfit.io.yaml"
    assert crd_file in INSTALL and (REPO / crd_file).exists()


def test_node_labels_are_the_ones_the_operator_reads() -> None:
    for label in (deployment.GPU_PRODUCT_LABEL, observe.GPU_MEMORY_LABEL, deployment.GPU_RESOURCE):
        assert f"`{label}`" in INSTALL or label in INSTALL, label
    assert "nvidia.com/gpu.compute.major" in INSTALL
    assert "GPU Operator" in INSTALL and "Feature Discovery" in INSTALL


def test_install_links_the_first_server_page_and_the_reference() -> None:
    assert "docs/first-server.md" in INSTALL and "docs/api-reference.md" in INSTALL


@pytest.mark.parametrize("phase", list(Phase), ids=[p.value for p in Phase])
def test_first_server_explains_every_phase(phase: Phase) -> None:
    assert re.search(rf"^\| `{phase.value}` \| \S", FIRST, re.M), f"docs/first-server.md: no row for {phase.value}"


@pytest.mark.parametrize("reason", [Reason.FITS, Reason.FITS_BELOW_TARGET, Reason.DOES_NOT_FIT, Reason.INVALID_SPEC,
                                    Reason.NO_ELIGIBLE_NODE, Reason.ENGINE_READY, Reason.BELOW_TARGET,
                                    Reason.STEPPED_DOWN, Reason.RETRYING])
def test_first_server_explains_the_condition_reasons(reason: Reason) -> None:
    assert f"`{reason.value}`" in FIRST


def test_first_server_plan_excerpt_is_what_the_planner_says() -> None:
    from ctxfit.api import InferenceServer
    from ctxfit.budget.planner import plan

    (cmd,) = commands(FIRST, "ctxfit plan")
    server = InferenceServer.model_validate(yaml.safe_load((REPO / cmd[-1]).read_text()))
    result = plan(server.spec)
    shown = dict(re.findall(r"│ (predicted max context|chosen context)\s+│ ([\d,]+) │", FIRST))
    assert int(shown["chosen context"].replace(",", "")) == result.context_length
    assert int(shown["predicted max context"].replace(",", "")) == result.max_context_length
    assert f"- {result.reasons[-1]}" in FIRST
