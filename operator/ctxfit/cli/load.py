"""Reading InferenceServer manifests for the CLI: one clear error line naming the field.

``-f FILE`` is read as ``kubectl apply -f`` reads it: a file of one or more YAML documents, ``-`` for stdin. Every
document of kind InferenceServer is a server (``load_servers``); documents of other kinds (the Gateway and HTTPRoute
of ``manifests/llama31-8b-gateway.yaml``) are skipped and named (``Servers.skipped``). A file of a single mapping
without ``kind`` is taken as the InferenceServer.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ctxfit.api import InferenceServer
from ctxfit.api.schema_types import server_schema, type_error

STDIN = "-"
"""The ``-f`` / ``--log`` / ``--message-file`` value that reads standard input (as kubectl's ``-f -``)."""
MANIFEST_MAX_BYTES = 16 << 20
"""The most of a manifest or YAML option file read (an InferenceServer is at most ~1.5 MB in etcd; ``-f /dev/zero``
would otherwise be read until memory runs out)."""
LOG_MAX_BYTES = 256 << 20
"""The most of an engine log read (``--log``, ``--message-file``)."""


class ManifestError(ValueError):
    """A manifest that cannot be read or validated; the message is one line naming the field."""


def _field_path(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc if not str(p).startswith("function-") and "[" not in str(p)]
    return ".".join(parts)


def validation_message(exc: ValidationError) -> str:
    """First pydantic error as ``field.path: rule`` (our own validators already start with the path)."""
    err = exc.errors()[0]
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    path = _field_path(tuple(err.get("loc", ())))
    head = msg.split(" ", 1)[0]
    if head.endswith(":"):  # our validators start with the field they check, relative to their model
        field_name = head[:-1]
        segments = path.split(".") if path else []
        first = field_name.split(".")[0]
        if first in segments:
            segments = segments[: len(segments) - 1 - segments[::-1].index(first)]
        prefix = ".".join(segments)
        return f"{prefix}.{msg}" if prefix and not field_name.startswith(prefix) else msg
    extra = f" (got {err['input']!r})" if err.get("type") in ("literal_error", "enum") else ""
    return f"{path}: {msg}{extra}"


def read_input(path: str | Path, flag: str = "", limit: int = MANIFEST_MAX_BYTES) -> bytes:
    """The bytes of ``path``, or of standard input for ``-``, at most ``limit`` of them.

    Raises:
        ManifestError: unreadable, standard input closed, or longer than ``limit`` bytes (one line, starting with
            ``flag: `` when given).
    """
    lead = f"{flag}: " if flag else ""
    shown = "stdin" if str(path) == STDIN else str(path)
    try:
        if str(path) == STDIN:
            if sys.stdin is None:  # started with stdin closed (<&-)
                raise ManifestError(f"{lead}stdin is not open")
            if hasattr(sys.stdin, "buffer"):
                data = sys.stdin.buffer.read(limit + 1)
            else:  # a text-only stdin (tests)
                data = sys.stdin.read(limit + 1).encode()
        else:
            with Path(path).open("rb") as fh:
                data = fh.read(limit + 1)
    except OSError as exc:
        raise ManifestError(f"{lead}cannot read {shown}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise ManifestError(f"{lead}{shown}: larger than {limit >> 20} MiB")
    return data


def read_text(path: str | Path, flag: str = "") -> str:
    """The text of ``path``, or of standard input for ``-`` (``read_input``).

    Raises:
        ManifestError: as ``read_input``, or not UTF-8 (one line, starting with ``flag: `` when given).
    """
    lead = f"{flag}: " if flag else ""
    shown = "stdin" if str(path) == STDIN else str(path)
    try:
        return read_input(path, flag).decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError(f"{lead}{shown}: not UTF-8 text") from None


@dataclass
class Servers:
    """What ``load_servers`` found in one ``-f`` file.

    Attributes:
        servers: (document index from 1, its ``metadata.name`` or None, the server or the one-line error of that
            document), in file order.
        skipped: ``Kind name`` of each document that is not an InferenceServer (not planned).
    """

    servers: list[tuple[int, str | None, InferenceServer | ManifestError]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def names(self) -> list[str]:
        """The names of the servers that parsed."""
        return [s.metadata.name for _, _, s in self.servers if isinstance(s, InferenceServer)]

    def named(self, name: str) -> list[tuple[int, str | None, InferenceServer | ManifestError]]:
        """The documents of ``metadata.name`` ``name`` (one that does not validate too: its error is the answer)."""
        return [entry for entry in self.servers if entry[1] == name]

    def note(self) -> str | None:
        """One line naming the skipped documents, None when none was."""
        if not self.skipped:
            return None
        return (f"skipped {len(self.skipped)} document{'s' if len(self.skipped) > 1 else ''} that "
                f"{'are' if len(self.skipped) > 1 else 'is'} not an InferenceServer: {', '.join(self.skipped)}")


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a mapping key given twice, as ``kubectl apply -f`` does (sigs.k8s.io/yaml
    in strict mode: ``key "target" already set in map``), instead of keeping the last value silently."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *anchor`` may repeat: the merge rule
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base constructor says so
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (line {key_node.start_mark.line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep)


def _items(doc: Any) -> list[Any]:
    """A ``kind: List`` document (what ``kubectl get -o yaml`` prints) as its items, as ``kubectl apply -f`` reads
    it; any other document as itself."""
    if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
        return [item for item in doc["items"] if item is not None]
    return [doc]


def _describe(doc: Any) -> str:
    if not isinstance(doc, dict):
        return type(doc).__name__
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return f"{doc.get('kind')} {name}" if isinstance(name, str) else str(doc.get("kind"))


def _server(doc: dict[str, Any]) -> InferenceServer:
    if "spec" not in doc:
        raise ManifestError("spec: required" if "kind" in doc else
                            "spec: required (a document without kind is read as an InferenceServer; "
                            "kind: InferenceServer, apiVersion: ctxfit.io/v1alpha1)")
    wrong = type_error(server_schema(), doc)  # as the API server, before the models' lax reading
    if wrong:
        raise ManifestError(wrong)
    try:
        return InferenceServer.model_validate(doc)
    except ValidationError as exc:
        raise ManifestError(validation_message(exc)) from exc


def load_servers(path: str | Path) -> Servers:
    """Every InferenceServer document of ``path`` (``-``: stdin), each validated on its own.

    A document that does not validate is kept as its one-line ``ManifestError`` (prefixed with its name, or
    ``document N``, when the file holds more than one server), so the others are still planned.

    Raises:
        ManifestError: unreadable file, not UTF-8, not valid YAML, or no InferenceServer document at all.
    """
    shown = "stdin" if str(path) == STDIN else str(path)
    text = read_text(path)
    try:
        docs = [d for d in yaml.load_all(text, Loader=_UniqueKeyLoader) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{shown}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:  # ValueError: e.g. a 5000-digit integer
        raise ManifestError(f"{shown}: not a readable YAML text ({type(exc).__name__})") from exc
    docs = [item for d in docs for item in _items(d)]
    found = Servers()
    indexed = [(i, d) for i, d in enumerate(docs, start=1)
               if isinstance(d, dict) and d.get("kind") == "InferenceServer"]
    if not indexed and len(docs) == 1 and isinstance(docs[0], dict) and "kind" not in docs[0]:
        indexed = [(1, docs[0])]  # a single kind-less mapping is taken as the InferenceServer
    if not indexed:
        raise ManifestError(f"{shown}: no InferenceServer document found")
    _refuse_repeated_names(shown, indexed)
    taken = {i for i, _ in indexed}
    found.skipped = [_describe(d) for i, d in enumerate(docs, start=1) if i not in taken]
    for index, doc in indexed:
        meta = doc.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) and isinstance(meta.get("name"), str) else None
        try:
            found.servers.append((index, name, _server(doc)))
        except ManifestError as exc:
            if len(indexed) > 1:
                exc = ManifestError(f"{name or f'document {index}'}: {exc}")
            found.servers.append((index, name, exc))
    return found


def _refuse_repeated_names(shown: str, indexed: list[tuple[int, Any]]) -> None:
    """Raise ``ManifestError`` when two documents name the same server (namespace and ``metadata.name``):
    ``kubectl apply -f`` would write the one object twice, the last document winning."""
    first: dict[tuple[str, str], int] = {}
    for index, doc in indexed:
        meta = doc.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            continue
        key = (str(meta.get("namespace") or ""), meta["name"])
        if key in first:
            where = f" in namespace {key[0]!r}" if key[0] else ""
            raise ManifestError(f"{shown}: InferenceServer {key[1]!r}{where} is given twice (documents {first[key]} "
                                f"and {index}); kubectl apply would write it twice, the last one winning")
        first[key] = index


def no_such_server(shown: str, name: str, found: Servers) -> str:
    """The ``--name`` error line: the file has no InferenceServer of that name; it lists those it has."""
    listed = ", ".join(n or f"document {i}" for i, n, _ in found.servers)
    return f"--name: {shown} has no InferenceServer {name!r} (it has {listed})"


def load_manifest(path: str | Path, name: str | None = None) -> InferenceServer:
    """The one InferenceServer of ``path`` (``-``: stdin) for the commands that take one (``diagnose``,
    ``calibrate``): with ``name``, the document of that ``metadata.name``; without, the file must hold exactly one.

    Raises:
        ManifestError: as ``load_servers``; a document that does not validate; several servers and no ``name``
            (the message lists them and says ``--name``); no server of that ``name``.
    """
    found = load_servers(path)
    shown = "stdin" if str(path) == STDIN else str(path)
    chosen = found.servers
    if name is not None:
        chosen = found.named(name)
        if not chosen:
            raise ManifestError(no_such_server(shown, name, found))
    elif len(chosen) > 1:
        listed = ", ".join(n or f"document {i}" for i, n, _ in chosen)
        raise ManifestError(f"{shown} holds {len(chosen)} InferenceServers ({listed}): choose one with --name NAME")
    server = chosen[0][2]
    if isinstance(server, ManifestError):
        raise server
    return server


def read_yaml(path: str, flag: str) -> Any:
    """The YAML document in ``path`` for the option ``flag``. Raises ``ManifestError`` (a ``ValueError``) with one
    line naming the option: unreadable, not UTF-8, not valid YAML, nested too deeply, beyond the YAML constructor's
    limits."""
    try:
        text = read_input(path, flag).decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError(f"{flag}: {path} is not UTF-8 text") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as exc:
        raise ManifestError(f"{flag}: {path} is not valid YAML ({str(exc).splitlines()[0]})") from exc
    except RecursionError:
        raise ManifestError(f"{flag}: {path} is nested too deeply") from None
    except ValueError as exc:  # the YAML constructor's own limits, e.g. an integer of > 4300 digits
        raise ManifestError(f"{flag}: {path} is not readable YAML ({str(exc).splitlines()[0][:80]})") from None
