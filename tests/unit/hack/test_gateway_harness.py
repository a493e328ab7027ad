"""The gateway add-on's pins (hack/gateway-bins.sh and hack/addons_gateway.py) stay in step, and k8s-bins.sh
fetches them, so CI installs what the e2e tests use."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "hack"))

import addons_gateway  # noqa: E402 - after the path


def _default(script: str, var: str) -> str:
    match = re.search(rf"^{var}=\$\{{{var}:-([^}}]+)\}}$", (REPO / "hack" / script).read_text(), re.MULTILINE)
    assert match, f"{var} default not found in {script}"
    return match.group(1)


def test_versions_match_the_fetch_script() -> None:
    assert _default("gateway-bins.sh", "GATEWAY_API_VERSION") == addons_gateway.GATEWAY_API_VERSION
    assert _default("gateway-bins.sh", "GIE_VERSION") == addons_gateway.GIE_VERSION
    assert f"lwepp-{addons_gateway.GIE_VERSION}" == addons_gateway.LWEPP_BINARY
    assert f"extproc-gateway-{addons_gateway.GIE_VERSION}" == addons_gateway.EXTPROC_GATEWAY_BINARY
    script = (REPO / "hack" / "gateway-bins.sh").read_text()
    assert 'ROUTE="$OUT/extproc-gateway-$GIE_VERSION"' in script and '"$HACK/extproc-gateway/main.go"' in script


def test_the_data_plane_speaks_the_pickers_protocol() -> None:
    """hack/extproc-gateway reads the endpoint from the header lwepp sets (GIE pkg/lwepp/metadata), and names the
    one it served in the header the tests read."""
    source = (REPO / "hack" / "extproc-gateway" / "main.go").read_text()
    assert 'const destinationHeader = "x-gateway-destination-endpoint"' in source
    assert 'destinationHeader+"-served"' in source
    assert addons_gateway.SERVED_ENDPOINT_HEADER == "x-gateway-destination-endpoint-served"


def test_k8s_bins_builds_the_gateway_component() -> None:
    text = (REPO / "hack" / "k8s-bins.sh").read_text()
    assert re.search(r'^build_gateway\(\) \{ OUT="\$OUT" bash "\$HACK/gateway-bins.sh"; \}$', text, re.MULTILINE)
    assert re.search(r"^ALL=\(.*\bgateway\b.*\)$", text, re.MULTILINE)


def test_the_pool_api_the_operator_speaks_is_the_one_fetched() -> None:
    from ctxfit.api.routing import GIE_GROUP, GIE_VERSION, POOL_PLURAL

    assert f"{POOL_PLURAL}.{GIE_GROUP}" == addons_gateway.INFERENCE_POOL_CRD
    assert GIE_VERSION == "v1"
