"""The calibration table in a ConfigMap of the operator's namespace (Kubernetes I/O; the rule is pure,
``ctxfit.budget.calibrate``).

Read-modify-replace with compare-and-swap, samples added exactly once, the ConfigMap never trusted.
The format and the bounds: docs/design/calibration-trust.md.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from ctxfit.budget.calibrate import CalibrationEntry, CalibrationKey, CalibrationTable, Sample

from .answers import conflict, not_found
from .protocol import KubeClient
from .rest import CONFIGMAPS

logger = logging.getLogger(__name__)
DATA_KEY = "calibration.yaml"
CACHE_SECONDS = 2.0
"""Planning reads the table at most this often (a burst of new servers shares one GET: one thread reads,
the others wait for its answer)."""
WRITE_ATTEMPTS = 8
MAX_TABLE_BYTES = 256 * 1024
"""The table's text is not parsed past this size, and the operator never writes more (``fit``: the keys sampled least
recently go first). Parsing a 1 MiB text took 8.5 s with PyYAML's pure-Python loader; 256 KiB takes
~0.1 s with libyaml's (bench/storm_bounds.py prints it), once per resourceVersion."""
OWN_LABELS = {"app.kubernetes.io/managed-by": "ctxfit", "app.kubernetes.io/component": "calibration"}
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
DROPPED = "CalibrationEntryDropped"
"""Warning Event on the ConfigMap: entries or samples of this resourceVersion were not valid and are not used."""
TOO_LARGE = "CalibrationTableTooLarge"
"""Warning Event on the ConfigMap: its text is over ``MAX_TABLE_BYTES`` and is not read."""
NOT_OURS = "CalibrationConfigMapNotOwned"
"""Warning Event on the ConfigMap: ctxfit did not write it (its labels), so new samples are not recorded in it."""
EVENT_PROBLEMS = 3
"""Problems named in one Event (the count says how many more)."""


class TableTooLarge(ValueError):
    """The ConfigMap's table text is over ``MAX_TABLE_BYTES``."""


def _table_of(configmap: dict[str, Any] | None) -> CalibrationTable:
    """The validated table of a ConfigMap (empty when absent or unreadable YAML).

    Raises:
        TableTooLarge: its text is over ``MAX_TABLE_BYTES`` (not parsed).
    """
    text = ((configmap or {}).get("data") or {}).get(DATA_KEY) or ""
    if not isinstance(text, str):
        return CalibrationTable(problems=("calibration.yaml is not text",))
    if len(text.encode()) > MAX_TABLE_BYTES:
        raise TableTooLarge(f"{len(text.encode())} bytes, at most {MAX_TABLE_BYTES}")
    try:
        loaded = yaml.load(text, Loader=Loader)  # a safe loader: CSafeLoader, else SafeLoader
    except yaml.YAMLError as exc:
        return CalibrationTable(problems=(f"not YAML ({str(exc)[:200]})",))
    return CalibrationTable.from_wire(loaded if isinstance(loaded, dict) else None)


def _ours(configmap: dict[str, Any] | None) -> bool:
    """ctxfit wrote this ConfigMap (its labels), or it does not exist yet."""
    labels = ((configmap or {}).get("metadata") or {}).get("labels") or {}
    return configmap is None or all(labels.get(k) == v for k, v in OWN_LABELS.items())


def _readable(configmap: dict[str, Any] | None) -> bool:
    text = ((configmap or {}).get("data") or {}).get(DATA_KEY) or ""
    return isinstance(text, str) and len(text.encode()) <= MAX_TABLE_BYTES


def _copy(table: CalibrationTable) -> CalibrationTable:
    """The valid entries of ``table`` as a new table ``add`` may change (the parsed one is shared by readers)."""
    return CalibrationTable({k: CalibrationEntry(e.key, e.count, list(e.samples)) for k, e in table.entries.items()})


def fit(table: CalibrationTable) -> str:
    """``render_table`` of ``table`` after dropping the keys sampled least recently until the text is at most
    ``MAX_TABLE_BYTES`` (``table`` is changed); never more than that is written."""
    text = render_table(table)
    while (size := len(text.encode())) > MAX_TABLE_BYTES and len(table.entries) > 1:
        excess = max(1, int(len(table.entries) * (size - MAX_TABLE_BYTES) / size))  # about the share too many
        for _ in range(min(excess, len(table.entries) - 1)):
            table.evict()
        text = render_table(table)
    while len(text.encode()) > MAX_TABLE_BYTES and table.entries:  # one key of huge samples: keep its newest
        entry = next(iter(table.entries.values()))
        entry.samples = entry.samples[1:]
        if not entry.samples:
            table.entries.clear()
        text = render_table(table)
    return text


def render_table(table: CalibrationTable) -> str:
    """The ConfigMap's YAML text (stable key order as written)."""
    header = ("# ctxfit calibration: observed minus predicted KV cache pool per GPU, per engine/minor/GPU/TP/PP.\n"
              "# correctionBytes = median residual (each clipped to +-2 GiB) x n/(n+1); see ctxfit.budget.calibrate.\n")
    return header + yaml.dump(table.to_wire(), Dumper=Dumper, sort_keys=False, width=120)


class CalibrationStore:
    """Reads and appends to the calibration ConfigMap ``namespace/name`` (thread-safe; raw JSON over
    ``Kube.rest``)."""

    def __init__(self, kube: KubeClient, namespace: str, name: str) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self._lock = threading.Lock()
        self._refresh = threading.Lock()
        self._cached: tuple[float, CalibrationTable] | None = None
        self._parsed: tuple[str, CalibrationTable] | None = None  # (resourceVersion, its table)
        self._said: set[tuple[str, str]] = set()
        self._last = CalibrationTable()  # the last table read or written

    def _parse(self, configmap: dict[str, Any] | None) -> CalibrationTable:
        """``_table_of`` once per resourceVersion, never raising: a table too large to read keeps the last table
        read; what was dropped is logged and said in one Warning Event on the ConfigMap per resourceVersion."""
        version = str(((configmap or {}).get("metadata") or {}).get("resourceVersion") or "")
        parsed = self._parsed
        if configmap is not None and parsed is not None and parsed[0] == version:
            return parsed[1]
        try:
            table = _table_of(configmap)
        except TableTooLarge as exc:
            self._warn(configmap, TOO_LARGE, f"calibration.yaml not read: {exc}; planning with the last table read "
                       "(ctxfit writes at most that much: delete the ConfigMap, or shorten it)")
            return self._last
        except Exception as exc:
            logger.exception("calibration ConfigMap %s/%s", self.namespace, self.name)
            table = CalibrationTable(problems=(f"unreadable ({type(exc).__name__})",))
        if table.problems:
            shown = "; ".join(table.problems[:EVENT_PROBLEMS])
            total = max(table.problem_count, len(table.problems))
            more = total - EVENT_PROBLEMS
            self._warn(configmap, DROPPED, f"{total} problem(s) in calibration.yaml, not used for "
                       f"planning: {shown}" + (f"; and {more} more" if more > 0 else ""))
        self._parsed = (version, table)
        self._last = table
        return table

    def _warn(self, configmap: dict[str, Any] | None, reason: str, message: str) -> None:
        """Log and post a Warning Event on the ConfigMap, once per (resourceVersion, reason)."""
        meta = (configmap or {}).get("metadata") or {}
        said = (str(meta.get("resourceVersion") or ""), reason)
        with self._lock:
            if said in self._said:
                return
            if len(self._said) > 64:
                self._said.clear()
            self._said.add(said)
        logger.warning("calibration ConfigMap %s/%s: %s", self.namespace, self.name, message)
        if configmap is not None:
            self.kube.post_object_event({"apiVersion": "v1", "kind": "ConfigMap", "name": self.name,
                                         "namespace": self.namespace, "uid": meta.get("uid"),
                                         "resourceVersion": meta.get("resourceVersion")}, "Warning", reason, message)

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
                table = self._parse(self._read())
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
            if not _ours(current):
                self._warn(current, NOT_OURS, f"not written by ctxfit (labels {OWN_LABELS}): it is only read; new "
                           "samples are not recorded in it")
                return 0
            table = _copy(self._parse(current) if _readable(current) else CalibrationTable())  # else: start over
            added = sum(1 for key, sample in samples if table.add(key, sample))
            if added == 0:
                return 0
            text = fit(table)
            metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace, "labels": dict(OWN_LABELS)}
            if current is not None:
                metadata["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                    "data": {DATA_KEY: text}}
            try:
                if current is None:
                    self.kube.rest.call("POST", CONFIGMAPS, self.namespace, body=body)
                else:
                    self.kube.rest.call("PUT", CONFIGMAPS, self.namespace, self.name, body=body)
            except ApiException as exc:
                if conflict(exc) or not_found(exc):
                    continue  # someone wrote in between (or it vanished): read again
                raise
            with self._lock:
                self._cached = (time.monotonic(), table)
                self._last = table
            return added
        raise ApiException(status=409, reason=f"calibration ConfigMap {self.namespace}/{self.name} kept changing")
