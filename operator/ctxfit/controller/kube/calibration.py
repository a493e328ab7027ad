"""The calibration table in a ConfigMap of the operator's namespace (Kubernetes I/O; the rule is pure,
``ctxfit.budget.calibrate``).

Data key ``calibration.yaml``: readable YAML, one entry per (engine, minor version, GPU, TP, PP) with
``count``, ``medianResidualBytes``/``GiB``, ``correctionBytes`` and the newest samples (server,
residual, time). Writes are read-modify-replace with the read ``resourceVersion`` (compare-and-swap,
retried on conflict); samples carry ``<server uid>/<attempt>`` and adding one twice is a no-op, so
writing the same samples again after a crash or a retry changes nothing (exactly once).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from ctxfit.budget.calibrate import CalibrationKey, CalibrationTable, Sample

from .client import Kube
from .rest import CONFIGMAPS

logger = logging.getLogger(__name__)
DATA_KEY = "calibration.yaml"
CACHE_SECONDS = 2.0
"""Planning reads the table at most this often (a burst of new servers shares one GET: one thread reads,
the others wait for its answer)."""
WRITE_ATTEMPTS = 8


def _table_of(configmap: dict[str, Any] | None) -> CalibrationTable:
    text = ((configmap or {}).get("data") or {}).get(DATA_KEY) or ""
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        return CalibrationTable()
    return CalibrationTable.from_wire(loaded if isinstance(loaded, dict) else None)


def render_table(table: CalibrationTable) -> str:
    """The ConfigMap's YAML text (stable key order as written)."""
    header = ("# ctxfit calibration: observed minus predicted KV cache pool per GPU, per engine/minor/GPU/TP/PP.\n"
              "# correctionBytes = median residual (each clipped to +-2 GiB) x n/(n+1); see ctxfit.budget.calibrate.\n")
    return header + yaml.safe_dump(table.to_wire(), sort_keys=False, width=120)


class CalibrationStore:
    """Reads and appends to the calibration ConfigMap ``namespace/name`` (thread-safe; raw JSON over
    ``Kube.rest``)."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self._lock = threading.Lock()
        self._refresh = threading.Lock()
        self._cached: tuple[float, CalibrationTable] | None = None

    def _read(self) -> dict[str, Any] | None:
        return self.kube.rest.read(CONFIGMAPS, self.namespace, self.name)

    def _fresh(self) -> CalibrationTable | None:
        with self._lock:
            if self._cached is not None and time.monotonic() - self._cached[0] < CACHE_SECONDS:
                return self._cached[1]
        return None

    def table(self) -> CalibrationTable:
        """The current table (cached for ``CACHE_SECONDS``); empty when the ConfigMap is absent. Best effort:
        an API error (e.g. no RBAC for it) keeps the last table read, so planning never waits on calibration."""
        table = self._fresh()
        if table is not None:
            return table
        with self._refresh:  # one GET per expiry; the others wait for it
            table = self._fresh()
            if table is not None:
                return table
            try:
                table = _table_of(self._read())
            except ApiException as exc:
                logger.warning("calibration ConfigMap %s/%s unreadable (%s): planning without new samples",
                               self.namespace, self.name, exc.status)
                table = self._cached[1] if self._cached is not None else CalibrationTable()
            with self._lock:
                self._cached = (time.monotonic(), table)
            return table

    def record(self, samples: list[tuple[CalibrationKey, Sample]]) -> int:
        """Add ``samples`` (idempotent by sample id). Returns how many were new. Raises ``ApiException``."""
        for _ in range(WRITE_ATTEMPTS):
            current = self._read()
            table = _table_of(current)
            added = sum(1 for key, sample in samples if table.add(key, sample))
            if added == 0:
                return 0
            metadata: dict[str, Any] = {
                "name": self.name, "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "ctxfit", "app.kubernetes.io/component": "calibration"}}
            if current is not None:
                metadata["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                    "data": {DATA_KEY: render_table(table)}}
            try:
                if current is None:
                    self.kube.rest.call("POST", CONFIGMAPS, self.namespace, body=body)
                else:
                    self.kube.rest.call("PUT", CONFIGMAPS, self.namespace, self.name, body=body)
            except ApiException as exc:
                if exc.status in (409, 404):
                    continue  # someone wrote in between (or it vanished): read again
                raise
            with self._lock:
                self._cached = (time.monotonic(), table)
            return added
        raise ApiException(status=409, reason=f"calibration ConfigMap {self.namespace}/{self.name} kept changing")
