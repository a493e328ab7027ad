"""Operator settings: one object, read from ``CTXFIT_*`` environment variables at startup.

Built in the ``@kopf.on.startup`` handler and kept on ``memo.state.runtime.settings`` (no module-level state).

| variable | default | meaning |
|---|---|---|
| ``CTXFIT_WATCH_NAMESPACES`` | empty = all | comma-separated namespaces to watch |
| ``CTXFIT_METRICS_PORT`` | 9090 | Prometheus ``/metrics`` port (0 disables) |
| ``CTXFIT_HEALTH_PORT`` | 8080 | kopf liveness endpoint ``/healthz`` (0 disables) |
| ``CTXFIT_PEERING`` | empty = standalone | leader-election Lease name: only the holder reconciles |
| ``CTXFIT_PEERING_NAMESPACE`` | ``POD_NAMESPACE`` or ``default`` | namespace of that Lease |
| ``CTXFIT_LEASE_SECONDS`` | 15 | Lease duration: a standby takes over this long after the leader stops renewing |
| ``CTXFIT_DEFAULT_HEADROOM`` | 0.25 | KV headroom when ``spec.context.headroom`` is unset |
| ``CTXFIT_VLLM_IMAGE`` / ``CTXFIT_SGLANG_IMAGE`` | engine's official image | default images |
| ``CTXFIT_MAX_ATTEMPTS`` | 5 | cap on attempts per spec (``spec.attempts`` may be lower) |
| ``CTXFIT_GROUP_RESTART_BUDGET`` | 3 | multi-node: group recreations without Ready before Failed |
| ``CTXFIT_BACKOFF_SECONDS`` | 10 | wait before attempt 2; doubles per attempt |
| ``CTXFIT_BACKOFF_MAX_SECONDS`` | 300 | cap of that wait |
| ``CTXFIT_RESYNC_SECONDS`` | 300 | periodic re-reconcile of every server |
| ``CTXFIT_NODE_RECHECK_SECONDS`` | 30 | re-check of servers waiting for an eligible node |
| ``CTXFIT_STARTUP_GRACE_SECONDS`` | 120 | a pod not Ready this long after ``startupTimeoutSeconds`` failed |
| ``CTXFIT_WORKERS`` | 32 | concurrent reconciles (threads, mostly waiting on the API server; see below) |
| ``CTXFIT_LOG_TAIL_LINES`` | 200 | previous-log lines read when the termination message is cut |
| ``CTXFIT_ALLOWED_IMAGE_PREFIXES`` | empty = any | comma-separated image prefixes a server may use |
| ``CTXFIT_ALLOW_WILDCARD_TOLERATIONS`` | true | false: refuse tolerations without a key |
| ``CTXFIT_ALLOWED_TOLERATION_KEYS`` | empty = any | comma-separated toleration keys a server may use |
| ``CTXFIT_ALLOW_SECRET_ENV`` | true | false: refuse every Secret named (env ``secretKeyRef``, ``tokenSecretRef``) |
| ``CTXFIT_ALLOWED_SECRETS`` | empty | Secret names allowed even when ``CTXFIT_ALLOW_SECRET_ENV`` is false |
| ``CTXFIT_ALLOW_HOST_PATH`` | true | false: refuse ``model.cache.hostPath`` |
| ``CTXFIT_ALLOWED_HOST_PATH_PREFIXES`` | empty: not system dirs | directories a ``hostPath`` cache must be under |
| ``CTXFIT_ALLOW_SECURITY_ANNOTATIONS`` | false | true: allow ``pod.annotations`` setting AppArmor/seccomp/runtime |
| ``CTXFIT_ALLOWED_GPU_PRODUCTS`` | empty = any | ``gpu.product`` values a server may ask for |
| ``CTXFIT_STARTUP_LOG_BYTES`` | 1048576 | head of a Ready engine's log read for its start-up accounting (0 disables) |
| ``CTXFIT_CALIBRATION_CONFIGMAP`` | ``ctxfit-calibration`` | ConfigMap of KV residual samples (empty disables) |
| ``CTXFIT_CALIBRATION_NAMESPACE`` | ``POD_NAMESPACE`` / ``default`` | namespace of that ConfigMap (the operator's) |
| ``CTXFIT_DEFAULT_CACHE`` | auto | cache without ``spec.model.cache``: ``auto`` default-class claim, ``emptyDir`` |
| ``CTXFIT_LOG_LEVEL`` | INFO | DEBUG, INFO (one line per decision per server), WARNING or ERROR |
| ``CTXFIT_KEDA_ENABLED`` | false | render a KEDA ScaledObject for servers with ``spec.autoscaling`` |
| ``CTXFIT_PROMETHEUS_ADDRESS`` | empty | Prometheus URL the ScaledObjects' triggers query (needed with KEDA) |
| ``CTXFIT_RESOLVER_IMAGE`` | empty | the operator's own image, run by resolver pods (gated repos, preloaded claims) |
| ``CTXFIT_RESOLVER_NODE_SELECTOR`` | empty | ``key=value,...``: where resolver pods run (e.g. a CPU pool) |
| ``CTXFIT_RESOLVER_TOLERATIONS`` | empty | ``key[=value][:Effect],...``: taints resolver pods tolerate |
| ``CTXFIT_MODEL_RECHECK_SECONDS`` | 21600 | a moving branch (revision not a commit) is re-checked this often |
| ``CTXFIT_RESOLVE_BACKOFF_SECONDS`` | 5 | first retry of a resolution while the Hub is unreachable; doubles |
| ``CTXFIT_RESOLVE_BACKOFF_MAX_SECONDS`` | 300 | cap of that wait |
| ``CTXFIT_TOKEN_RECHECK_SECONDS`` | 600 | a token's ModelAccessDenied is retried this often (the Secret may be fixed) |
| ``CTXFIT_RESOLVE_TIMEOUT_SECONDS`` | 120 | a resolution (or resolver pod run) not done by then: HubUnreachable |
| ``CTXFIT_RESOLVE_POLL_SECONDS`` | 2 | a server waiting for a resolution looks again this often |
| ``CTXFIT_GATEWAY_ENABLED`` | false | manage the InferencePools and pool labels of ``spec.routing`` servers |
| ``POD_NAME`` | host name | the pod's name (downward API, set by the chart): Lease holder, Events' reportingInstance |
| ``POD_NAMESPACE`` | ``default`` | the pod's namespace (downward API, set by the chart) |
"""

from __future__ import annotations

import os
import socket
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """Every operator setting (see the module docstring for the environment variables)."""

    model_config = SettingsConfigDict(env_prefix="CTXFIT_", extra="ignore", frozen=True)

    watch_namespaces: Annotated[tuple[str, ...], NoDecode] = ()
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 9090
    health_port: Annotated[int, Field(ge=0, le=65535)] = 8080
    peering: str = ""
    peering_namespace: str = Field(default_factory=lambda: os.environ.get("POD_NAMESPACE", "default"))
    default_headroom: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.25
    vllm_image: str = ""
    sglang_image: str = ""
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 5
    group_restart_budget: Annotated[int, Field(ge=1, le=100)] = 3
    """Recreations of any one LeaderWorkerSet group of an attempt tolerated without the group becoming Ready; the
    next one ends the server Failed (``GroupRestartsExhausted``; ``controller/converge/group_restarts.py``)."""
    backoff_seconds: Annotated[float, Field(ge=0)] = 10.0
    backoff_max_seconds: Annotated[float, Field(ge=0)] = 300.0
    resync_seconds: Annotated[float, Field(gt=0)] = 300.0
    node_recheck_seconds: Annotated[float, Field(gt=0)] = 30.0
    startup_grace_seconds: Annotated[float, Field(ge=0)] = 120.0
    workers: Annotated[int, Field(ge=1, le=256)] = 32
    """Concurrent reconciles (threads started on demand, ended when idle; later passes hold at most a
    quarter, the rest is kept for new servers' first passes). bench/reconcile_bench.py on 2 shared cores
    (bench/README.md): 200 servers burst, create -> Deployment p95 1.1 s with 32, 2.3 s with 96 (more
    requests in flight only slow the API server down); 1,000 servers backlog: the same rate with 32 and 96,
    peak RSS 153-157 MiB vs 187-189 MiB."""
    log_tail_lines: Annotated[int, Field(ge=0, le=10000)] = 200
    lease_seconds: Annotated[float, Field(ge=2)] = 15.0
    allowed_image_prefixes: Annotated[tuple[str, ...], NoDecode] = ()
    allow_wildcard_tolerations: bool = True
    allowed_toleration_keys: Annotated[tuple[str, ...], NoDecode] = ()
    allow_secret_env: bool = True
    allowed_secrets: Annotated[tuple[str, ...], NoDecode] = ()
    allow_host_path: bool = True
    allowed_host_path_prefixes: Annotated[tuple[str, ...], NoDecode] = ()
    allow_security_annotations: bool = False
    allowed_gpu_products: Annotated[tuple[str, ...], NoDecode] = ()
    startup_log_bytes: Annotated[int, Field(ge=0, le=64 * 1024 * 1024)] = 1024 * 1024
    calibration_configmap: str = "ctxfit-calibration"
    calibration_namespace: str = Field(default_factory=lambda: os.environ.get("POD_NAMESPACE", "default"))
    default_cache: Literal["auto", "emptyDir"] = "auto"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    keda_enabled: bool = False
    prometheus_address: str = ""
    resolver_image: str = ""
    """Image of resolver pods (the operator's own; the chart sets it): gated repositories and preloaded claims are
    resolved in the server's namespace, so the operator never reads a Secret (``kube/resolution.py``)."""
    resolver_node_selector: Annotated[tuple[str, ...], NoDecode] = ()
    """``key=value`` labels a resolver pod's node must have (none: anywhere; it needs no GPU)."""
    resolver_tolerations: Annotated[tuple[str, ...], NoDecode] = ()
    """``key[=value][:Effect]`` taints resolver pods tolerate (``Equal`` with a value, else ``Exists``)."""
    model_recheck_seconds: Annotated[float, Field(gt=0)] = 6 * 3600.0
    resolve_backoff_seconds: Annotated[float, Field(gt=0)] = 5.0
    resolve_backoff_max_seconds: Annotated[float, Field(gt=0)] = 300.0
    resolve_poll_seconds: Annotated[float, Field(gt=0)] = 2.0
    """How often a server waiting for a resolution looks again (a resolver pod is read, not watched)."""
    token_recheck_seconds: Annotated[float, Field(gt=0)] = 600.0
    resolve_timeout_seconds: Annotated[float, Field(gt=0)] = 120.0
    """A resolution (the operator's own Hub calls, or a resolver pod's run) not done by then failed as unreachable."""
    gateway_enabled: bool = False
    pod_name: str = Field(default_factory=lambda: os.environ.get("POD_NAME") or socket.gethostname())
    """Not a ``CTXFIT_`` variable: ``POD_NAME``, the name the chart gives it from the downward API (in a pod the host
    name is the pod's name too, cut to 63 characters; outside one it is the machine's)."""

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return (value.strip().upper() or "INFO") if isinstance(value, str) else value

    @field_validator("watch_namespaces", "allowed_image_prefixes", "allowed_toleration_keys", "allowed_secrets",
                     "allowed_host_path_prefixes", "allowed_gpu_products", "resolver_node_selector",
                     "resolver_tolerations", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    def image_for(self, engine: str) -> str | None:
        """The operator-wide image override for ``engine`` ("vllm"/"sglang"), None when unset."""
        value = {"vllm": self.vllm_image, "sglang": self.sglang_image}.get(engine, "")
        return value or None

    def backoff(self, failed_attempts: int) -> float:
        """Seconds to wait before the next start after ``failed_attempts`` failures (exponential, capped)."""
        if failed_attempts <= 0:
            return 0.0
        return float(min(self.backoff_max_seconds, self.backoff_seconds * 2 ** (failed_attempts - 1)))
