# ctxfit developer entry points. `make demo` and `make test` are the README quickstart.
PYTHON ?= python3
PYTEST ?= $(PYTHON) -m pytest
export PYTHONDONTWRITEBYTECODE = 1

.PHONY: install bins bins-cluster image fake-engine-image kind-demo kind-delete kind-node-image demo test test-unit test-tools test-e2e lint typecheck crd bench bench-operator help

help:
	@echo "make install   - pip install -e .[test]"
	@echo "make demo      - local control plane + operator + manifests/kimi-128k.yaml (Ctrl-C tears down)"
	@echo "make test      - lint, unit tests, e2e tests against the local control plane"
	@echo "make image     - build the operator image from the Dockerfile (docker, podman or buildah)"
	@echo "make kind-demo - a kind cluster with ctxfit, fake GPUs and kimi-128k Ready (needs Docker or podman)"
	@echo "make kind-delete - delete the kind-demo cluster"
	@echo "make kind-node-image - kind's node image built offline (where docker.io/kindest/node cannot be pulled)"
	@echo "make test-unit - unit tests without Go, helm or promtool (minutes, on a fresh clone)"
	@echo "make test-tools - the unit tests that run helm (built alone) or promtool"
	@echo "make bench     - planner and calibration benchmarks (bench/)"
	@echo "make bench-operator - reconcile 200 servers on the local control plane"

install:
	$(PYTHON) -m pip install -q -e ".[test]"

# Kubernetes binaries, etcd, kwok, helm, the LWS controller and the KEDA operator from the Go module proxy
# (cached; ~9 min cold for Kubernetes alone, up to ~25 min more for KEDA: hack/keda-bins.sh)
bins:
	bash hack/k8s-bins.sh

# The operator image from the Dockerfile (hack/image.sh): docker with a daemon, else podman/buildah; the
# official python base where it can be pulled, else an offline Debian base (hack/base-image.sh). IMAGE=tag.
IMAGE ?= localhost/ctxfit:dev
image:
	IMAGE=$(IMAGE) bash hack/image.sh

# kind for users (Docker or podman): a kind cluster with ctxfit, fake GPUs and kimi-128k Ready (hack/kind-demo.sh)
kind-demo:
	bash hack/kind-demo.sh

kind-delete:
	bash hack/kind-demo.sh --delete

# kind's node image built offline from the harness's Kubernetes binaries (hack/kind-node-image.sh); kind-demo uses
# it by itself where kindest/node cannot be pulled
kind-node-image:
	bash hack/kind-node-image.sh

# The fake engine (hack/fake-engine: vLLM/SGLang start-up logs, /health, /v1/models) for the real node and kind
fake-engine-image:
	IMAGE=localhost/ctxfit-fake-engine:dev DOCKERFILE=hack/fake-engine/Containerfile CONTEXT=hack bash hack/image.sh

# What the demo's control plane needs: kube-apiserver, controller-manager, scheduler, kubectl, etcd, kwok
bins-cluster:
	bash hack/k8s-bins.sh cluster

# DEMO_ARGS: extra hack/demo.py arguments, e.g. DEMO_ARGS="--dir /tmp/demo --once"
DEMO_ARGS ?=
demo: install bins-cluster
	$(PYTHON) hack/demo.py $(DEMO_ARGS)

lint:
	ruff check operator tests bench hack
	lint-imports

# Fix what ruff fixes safely (import order, unused imports and noqa); no reformatting of the code base
fmt:
	ruff check --fix operator tests bench hack

typecheck:
	mypy operator/ctxfit tests/unit/controller/fakekube.py tests/unit/controller/kube/fakeapi.py

test-unit:
	$(PYTEST) tests/unit -q -m "not tools"

test-tools:
	$(PYTEST) tests/unit -q -m tools

test-e2e: bins
	$(PYTEST) tests/e2e -q -m e2e

# One pytest run for everything, so an empty collection or any failure fails the target.
test: install bins lint typecheck
	$(PYTEST) tests -q; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; exit $$rc

crd:
	$(PYTHON) -m ctxfit.cli crd > crds/inferenceservers.ctxfit.io.yaml
	cp crds/inferenceservers.ctxfit.io.yaml charts/ctxfit/files/crds/inferenceservers.ctxfit.io.yaml
	$(PYTHON) -m ctxfit.cli crd -o markdown > docs/api-reference.md

bench:
	$(PYTHON) bench/plan_bench.py
	$(PYTHON) bench/overhead_fit.py

# 200 InferenceServers against the local control plane: create -> Deployment p50/p95/max, operator RSS
bench-operator: bins
	$(PYTHON) bench/reconcile_bench.py
