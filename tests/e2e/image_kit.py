"""Fixtures for tests that build and run container images (registered in tests/e2e/conftest.py, so every module
shares one of each: a test just names them).

- `container_engine` (session): hack/images.engine(): podman here (docker where a daemon runs). A machine
  without one fails the test: .ci/run installs podman.
- `fake_engine_image` (session): hack/fake-engine (`make fake-engine-image`), for pods on the real node.
- `operator_image` (session): the operator image built from the Dockerfile by hack/image.sh, as `make image`
  does (here on hack/base-image.sh's offline Debian base; ~5 min cold, seconds when cached).
"""

from __future__ import annotations

import time

import images
import pytest

try:
    from .conftest import report
except ImportError:  # pragma: no cover
    def report(line: str) -> None:
        print(line)


@pytest.fixture(scope="session")
def container_engine() -> images.Engine:
    try:
        return images.engine()
    except images.ImageError as exc:
        pytest.fail(f"no container engine (install podman: apt-get install podman): {exc}")


@pytest.fixture(scope="session")
def operator_image(container_engine: images.Engine) -> str:
    start = time.monotonic()
    try:
        image = images.build_operator_image()
    except images.ImageError as exc:
        pytest.fail(str(exc))
    report(f"operator image {image} ({container_engine.name}): built or checked in {time.monotonic() - start:.0f} s")
    return image


@pytest.fixture(scope="session")
def fake_engine_image(container_engine: images.Engine) -> str:
    """hack/fake-engine's image (`make fake-engine-image`), on the same base as the operator image."""
    start = time.monotonic()
    try:
        image = images.build_fake_engine_image()
    except images.ImageError as exc:
        pytest.fail(str(exc))
    report(f"fake engine image {image}: built or checked in {time.monotonic() - start:.0f} s")
    return image
