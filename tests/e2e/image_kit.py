"""Fixtures for tests that build and run container images (import them into a test module:
``from .image_kit import container_engine, operator_image  # noqa: F401``).

- `container_engine` (session): hack/images.engine(): podman here (docker where a daemon runs). A machine
  without one fails the test: .ci/run installs podman.
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
