# syntax=docker/dockerfile:1
# The ctxfit operator image:  make image  (hack/image.sh: docker, podman or buildah), or
#   docker build -t ghcr.io/ctxfit/ctxfit:0.1.0 .
# PYTHON_IMAGE is the base of both stages: the official image by default; any Debian/Ubuntu-like image with
# `python` (3.11+), venv and pip works (CI builds on hack/base-image.sh's offline Debian base).
# tests/e2e/test_image.py builds this file and runs the image.

ARG PYTHON_IMAGE=docker.io/library/python:3.11.11-slim-bookworm

# ---- build: wheels of ctxfit and of every dependency (all have wheels: no compiler needed), then a venv
FROM ${PYTHON_IMAGE} AS build
# hack/image.sh keeps the newest build stage (its layer cache) and prunes older, untagged ones by this label
LABEL io.ctxfit.image=build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ctxfit/ ./operator/ctxfit/
RUN python -m pip wheel --wheel-dir /wheels .
RUN python -m venv /opt/ctxfit
RUN /opt/ctxfit/bin/pip install --no-index --find-links /wheels ctxfit

# ---- runtime: the base image plus the venv; non-root; no build tools
FROM ${PYTHON_IMAGE}
LABEL io.ctxfit.image=operator
RUN groupadd --system --gid 65532 ctxfit && \
    useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin ctxfit
COPY --from=build /opt/ctxfit /opt/ctxfit
ENV PATH=/opt/ctxfit/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    HF_HOME=/tmp/huggingface \
    CTXFIT_HEALTH_PORT=8080 \
    CTXFIT_METRICS_PORT=9090
USER 65532:65532
# kopf's liveness endpoint /healthz and the Prometheus /metrics
EXPOSE 8080 9090
ENTRYPOINT ["python", "-m", "ctxfit.controller"]
