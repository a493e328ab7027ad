"""Operator settings: one object, read from ``CTXFIT_*`` environment variables at startup.

Built in the ``@kopf.on.startup`` handler and kept on ``memo.state.runtime.settings`` (no module-level state).
Every variable, its default and its meaning: docs/design/settings.md.
"""

from __future__ import annotations

import os
import socket
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """Every operator setting (the environment variables: docs/design/settings.md)."""

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
