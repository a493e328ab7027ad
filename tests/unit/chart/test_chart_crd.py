"""The chart's CRD is the generated one: a byte-for-byte copy of crds/inferenceservers.ctxfit.io.yaml
(`ctxfit crd`), and what the chart renders from it is that CRD plus the chart's labels and keep policy.

After regenerating the CRD (`make crd`), refresh the chart's copy:
    cp crds/inferenceservers.ctxfit.io.yaml charts/ctxfit/files/crds/
"""

from __future__ import annotations

import pytest
import yaml

from tests.unit.chart.chartkit import CHART, REPO, one, render

GENERATED = REPO / "crds" / "inferenceservers.ctxfit.io.yaml"
CHART_COPY = CHART / "files" / "crds" / "inferenceservers.ctxfit.io.yaml"
REFRESH = "cp crds/inferenceservers.ctxfit.io.yaml charts/ctxfit/files/crds/"


def test_chart_copy_is_the_generated_crd_byte_for_byte() -> None:
    assert GENERATED.is_file(), f"{GENERATED} is missing: `make crd` generates it"
    assert CHART_COPY.is_file(), f"{CHART_COPY} is missing: {REFRESH}"
    assert CHART_COPY.read_bytes() == GENERATED.read_bytes(), f"the chart's CRD is stale: {REFRESH}"


@pytest.mark.parametrize("keep", [True, False], ids=["keep", "no-keep"])
def test_rendered_crd_is_the_generated_crd_plus_chart_metadata(keep: bool) -> None:
    generated = yaml.safe_load(GENERATED.read_text())
    rendered = one(render((), {"crds.keep": keep}), "CustomResourceDefinition")
    meta = rendered.pop("metadata")
    generated_meta = generated.pop("metadata")
    assert rendered == generated  # spec, apiVersion, kind: unchanged by the template
    assert meta["name"] == generated_meta["name"]
    # the generated labels win over the chart's (e.g. app.kubernetes.io/component: crd)
    assert generated_meta.get("labels", {}).items() <= meta["labels"].items()
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    annotations = meta.get("annotations", {})
    assert (annotations.get("helm.sh/resource-policy") == "keep") is keep
    assert {k: v for k, v in annotations.items() if k != "helm.sh/resource-policy"} == \
        generated_meta.get("annotations", {})
