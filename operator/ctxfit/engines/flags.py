"""Engine flags passed through ``spec.engine.args``: what each one does to memory, and how the planner treats it.

Every engine package has a table (``engines/vllm/flags.py``, ``engines/sglang/flags.py``) of each flag of its
supported versions that changes GPU or host memory (``FlagRule``), with the versions it exists in (read from the
argument parsers of the released wheels: tests/fixtures/engine-flags, ``hack/engine_flags.py``) and what the
planner does with it (``Handling``): ctxfit renders it from a spec field (MANAGED: refused in ``engine.args``,
``api/validation.py MANAGED_FLAGS`` does it at the API server), the planner reads it (MODELLED), or it is refused
with a message naming the spec field to use (REFUSED, or CONDITIONAL: refused unless a spec field states what the
flag changes). Every other flag of those parsers is listed as passing through (it changes nothing the budget
counts); tests/unit/test_engine_flags.py checks that the two lists cover every flag of every version read.

``parse`` reads ``engine.args`` as the engines' parsers do: ``--flag value``, ``--flag=value``, argparse's unique
prefixes (``allow_abbrev`` is on in both engines), vLLM's ``--flag_name`` spelling and ``--json-flag.key value``
sub-keys, ``--no-flag`` for boolean flags; the last occurrence wins.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxfit.api import Architecture, InferenceServerSpec


class Handling(StrEnum):
    """What the planner does with a memory-relevant flag found in ``engine.args``."""

    MANAGED = "managed"
    """ctxfit renders it from a spec field; ``engine.args`` may not set it (refused at the API server)."""
    MODELLED = "modelled"
    """The planner reads its value and budgets what it changes."""
    REFUSED = "refused"
    """Refused: the message names the spec field to use instead (or says ctxfit cannot budget it)."""
    CONDITIONAL = "conditional"
    """Refused unless ``FlagRule.allowed`` accepts the value and the spec (e.g. a spec field states the effect)."""


NO_FIELD = ""
"""``FlagRule.use`` of a refused flag no spec field replaces: the message says to remove it."""


class Takes(StrEnum):
    """What a flag consumes on the command line (the fixture's ``kind``)."""

    NOTHING = "flag"
    BOOL = "bool"
    VALUE = "value"
    MULTI = "multi"
    OPTIONAL = "optional"


# The short names the engines' tables (``engines/vllm/flags.py``, ``engines/sglang/flags.py``) write their rules with.
M, MOD, REF, COND = Handling.MANAGED, Handling.MODELLED, Handling.REFUSED, Handling.CONDITIONAL
N, B, V, MANY, OPT = Takes.NOTHING, Takes.BOOL, Takes.VALUE, Takes.MULTI, Takes.OPTIONAL
LORA = "spec.lora"
SPEC = "spec.speculative"
WEIGHTS = "spec.model.weightsPerGPU (the weights that stay on each GPU)"
ARCH = "spec.model.architecture (the geometry the override gives)"
NOT_PLANNED = NO_FIELD


def _version(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(".")[:3] if p.isdigit()]
    major, minor, patch = [*parts, 0, 0, 0][:3]
    return major, minor, patch


@dataclass(frozen=True)
class FlagRule:
    """One memory-relevant flag of one engine.

    Attributes:
        names: every spelling the engine's parsers accept (aliases included), first the canonical one.
        versions: the releases it exists in, as read in the wheels ("0.8.0-0.33.0"; several spans with ", ").
        takes: what it consumes on the command line.
        handling: what the planner does with it.
        effect: what it changes in GPU or host memory (engine source).
        use: MANAGED/REFUSED/CONDITIONAL: the spec field to use instead (the admission message names it);
            MODELLED: how the planner models it.
        allowed: CONDITIONAL only: ``(occurrence, spec) -> True`` when the flag may pass as written.
    """

    names: tuple[str, ...]
    versions: str
    takes: Takes
    handling: Handling
    effect: str
    use: str
    allowed: Callable[[Occurrence, InferenceServerSpec], bool] | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        """The canonical spelling."""
        return self.names[0]

    def exists_in(self, version: tuple[int, int, int], newest_read: tuple[int, int, int]) -> bool:
        """Whether the flag exists in ``version``: inside a span of ``versions`` (a span's first release is exact;
        its last covers that minor's later patches; a span ending at ``newest_read`` covers later releases)."""
        for span in self.versions.split(", "):
            first, _, final = span.partition("-")
            low, high = _version(first), _version(final or first)
            if version < low:
                continue
            if version[:2] <= high[:2] or high >= newest_read:
                return True
        return False


@dataclass(frozen=True)
class FlagTable:
    """An engine's memory-relevant flags and the flags that pass through, with its parser's spelling rules."""

    engine: str
    rules: tuple[FlagRule, ...]
    passthrough: frozenset[str]
    """Long names (and aliases) of every other flag of the versions read: no effect on any budgeted term."""
    versions_read: str
    underscores: bool = False
    """vLLM's ``FlexibleArgumentParser`` turns ``_`` into ``-`` in flag names (before the first ``.``)."""
    dotted: bool = False
    """vLLM's ``--compilation-config.mode 0`` / ``-O.mode=0`` sub-keys of JSON flags."""

    def by_name(self) -> dict[str, FlagRule]:
        """Every spelling of every rule -> the rule (built once per table; do not mutate)."""
        return self._by_name

    def known(self) -> frozenset[str]:
        """Every long or short name the table knows (rules and pass-through)."""
        return self._known

    @functools.cached_property
    def _by_name(self) -> dict[str, FlagRule]:
        return {n: rule for rule in self.rules for n in rule.names}

    @functools.cached_property
    def _known(self) -> frozenset[str]:
        return frozenset(self._by_name) | self.passthrough


@dataclass(frozen=True)
class Occurrence:
    """One flag as written in ``engine.args``, resolved to its canonical name.

    Attributes:
        written: the argument as the user wrote it (``--num-gpu-blocks=100``).
        name: the canonical name (``--num-gpu-blocks-override``), or the written name when unknown.
        value: the value it was given (None for a flag that takes none; ``"false"`` for ``--no-x``).
        key: the JSON sub-key of a dotted vLLM flag (``mode`` of ``-O.mode=0``), else None.
        rule: the memory rule, None for a pass-through or unknown flag.
        known: the table knows the flag (a rule or pass-through).
    """

    written: str
    name: str
    value: str | None
    key: str | None
    rule: FlagRule | None
    known: bool


def weights_given(occ: Occurrence, spec: InferenceServerSpec) -> bool:
    """``FlagRule.allowed`` of a flag that changes the weights on each GPU: the spec states them
    (``spec.model.weightsPerGPU``, ``WEIGHTS``)."""
    return spec.model.weights_per_gpu is not None


def architecture_given(occ: Occurrence, spec: InferenceServerSpec) -> bool:
    """``FlagRule.allowed`` of a flag that overrides the model's geometry: the spec states it
    (``spec.model.architecture``, ``ARCH``)."""
    return spec.model.architecture is not None


_NUMBER = re.compile(r"^-\d|^-\.\d")


def _is_flag(token: str) -> bool:
    return token.startswith("-") and not _NUMBER.match(token) and token not in ("-",)


def _normalise(token: str, table: FlagTable) -> tuple[str, str | None]:
    """(name, dotted key) with vLLM's underscore and dotted spellings undone."""
    name, key = token, None
    if table.dotted and "." in token:
        name, _, key = token.partition(".")
    if table.underscores and name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name, key


def resolve(name: str, table: FlagTable) -> tuple[str, FlagRule | None, bool]:
    """(canonical name, rule, known): exact spellings first, then argparse's unique prefix of a long name
    (``allow_abbrev``); ``--no-x`` of a boolean flag resolves to ``x`` (some flags are ``store_true`` in one
    version and ``--x/--no-x`` in another)."""
    rules = table.by_name()
    if name in rules:
        rule = rules[name]
        return rule.name, rule, True
    if name in table.passthrough:
        return name, None, True
    if name.startswith("--no-"):
        positive = "--" + name[5:]
        boolean = rules.get(positive)
        if boolean is not None and boolean.takes in (Takes.BOOL, Takes.NOTHING):
            return boolean.name, boolean, True
        if positive in table.passthrough:
            return positive, None, True
    if name.startswith("--") and len(name) > 2:
        matches = {n for n in table.known() if n.startswith(name) and n.startswith("--")}
        owners = {rules[n].name if n in rules else n for n in matches}
        if len(owners) == 1:
            only = next(iter(owners))
            return only, rules.get(only), True
    return name, None, False


def parse(args: Iterable[str], table: FlagTable) -> list[Occurrence]:
    """The flags in ``args``, in order (values that are not flags are attached to the flag before them).

    A rule's flag consumes what ``FlagRule.takes`` says; another flag takes the next token when it does not look
    like a flag (a negative number is a value). Never raises.
    """
    tokens = list(args)
    out: list[Occurrence] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not _is_flag(token):
            continue
        written = token
        value: str | None = None
        if "=" in token:
            token, _, value = token.partition("=")
        attached = None
        if table.dotted and re.match(r"^-O\d", token):  # vLLM -O3
            token, attached = "-O", token[2:]
        name, key = _normalise(token, table)
        canonical, rule, known = resolve(name, table)
        negated = name.startswith("--no-") and canonical != name and rule is not None and rule.takes in (
            Takes.BOOL, Takes.NOTHING)
        if value is None and attached is not None:
            value = attached
        takes = rule.takes if rule is not None else None
        if value is None and takes in (Takes.VALUE, Takes.MULTI, Takes.OPTIONAL, None) \
                and i < len(tokens) and not _is_flag(tokens[i]):
            value = tokens[i]
            i += 1
            if takes is Takes.MULTI:
                while i < len(tokens) and not _is_flag(tokens[i]):
                    value += " " + tokens[i]
                    i += 1
        if negated:
            value = "false"
        out.append(Occurrence(written, canonical, value, key, rule, known))
    return out


def last(occurrences: Iterable[Occurrence], name: str) -> Occurrence | None:
    """The last occurrence of canonical ``name`` (argparse keeps the last value), None when absent."""
    found = None
    for occ in occurrences:
        if occ.name == name:
            found = occ
    return found


def truthy(occ: Occurrence | None) -> bool:
    """A boolean flag is on: present, and not ``--no-x`` / ``=false`` / ``=0``."""
    if occ is None:
        return False
    return occ.value is None or occ.value.strip().lower() not in ("false", "0", "no", "off")


def refusal(engine: str, occ: Occurrence, version: str) -> str:
    """The admission message for a refused flag: names the flag, why, and the spec field to use."""
    assert occ.rule is not None
    rule = occ.rule
    shown = occ.written.split("=", 1)[0]
    alias = f" ({rule.name})" if shown != rule.name else ""
    if rule.use == NO_FIELD:
        return f"{shown}{alias} {rule.effect}, which ctxfit does not budget for {engine} {version}; remove it"
    return (f"{shown}{alias} {rule.effect}, which ctxfit's plan for {engine} {version} does not follow; use "
            f"{rule.use} instead")


def refusals(occurrences: Iterable[Occurrence], spec: InferenceServerSpec, engine: str, version: str
             ) -> list[tuple[str, str]]:
    """("spec.engine.args", message) for every MANAGED, REFUSED or (not allowed) CONDITIONAL flag in
    ``occurrences``."""
    out: list[tuple[str, str]] = []
    for occ in occurrences:
        rule = occ.rule
        if rule is None or rule.handling is Handling.MODELLED:
            continue
        if rule.handling is Handling.CONDITIONAL and rule.allowed is not None and rule.allowed(occ, spec):
            continue
        item = ("spec.engine.args", refusal(engine, occ, version))
        if item not in out:
            out.append(item)
    return out


def missing_in_version(rendered: Iterable[str], table: FlagTable, version: tuple[int, int, int]
                       ) -> list[tuple[str, str]]:
    """(spec field, message) for each flag of ``rendered`` (what ctxfit renders, user args included) that
    ``version``'s parser does not have (``FlagRule.exists_in``); the field is the one that asks for the flag. Releases
    older than ``table.versions_read`` are not judged (their parsers were not read)."""
    oldest, _, latest = table.versions_read.partition("-")
    newest = _version(latest)
    out: list[tuple[str, str]] = []
    if version < _version(oldest):
        return out  # a release older than the parsers read: nothing known about its flags
    for occ in parse(rendered, table):
        rule = occ.rule
        if rule is not None and not rule.exists_in(version, newest):
            shown = ".".join(str(v) for v in version)
            where = rule.use.split(" ", 1)[0] if rule.handling is Handling.MANAGED else "spec.engine.args"
            item = (where, f"{table.engine} {shown} has no {rule.name} (it exists in {rule.versions})")
            if item not in out:
                out.append(item)
    return out


def unknown(occurrences: Iterable[Occurrence]) -> list[str]:
    """Written names the table does not know (not a flag of any version read)."""
    return [occ.written.split("=", 1)[0] for occ in occurrences if not occ.known]


def passthrough_flags(package: str) -> frozenset[str]:
    """An engine's pass-through flags (``FlagTable.passthrough``): ``flags`` of ``passthrough.json`` in the engine's
    ``package`` (``ctxfit.engines.vllm``): every flag of the versions read that is in no rule of its table (it changes
    no term the budget counts), written by hand from tests/fixtures/engine-flags/<engine>.json after review.
    Raises OSError / KeyError when the package has no such file (a packaging fault)."""
    import json
    from importlib import resources

    text = resources.files(package).joinpath("passthrough.json").read_text(encoding="utf-8")
    return frozenset(str(flag) for flag in json.loads(text)["flags"])


def json_keys(value: str | None) -> Mapping[str, object]:
    """A JSON-object flag value as a dict ({} when it is not one)."""
    import json

    if not value:
        return {}
    try:
        loaded = json.loads(value)
    except (ValueError, TypeError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def number(occ: Occurrence | None) -> float:
    """The numeric value of a flag (0 when absent or not a positive finite number: the engine refuses it)."""
    if occ is None or occ.value is None:
        return 0.0
    try:
        value = float(occ.value)
    except ValueError:
        return 0.0
    return value if 0 < value < float("inf") else 0.0


def sliding_as_full(architecture: Architecture) -> Architecture:
    """``architecture`` with every sliding-window layer budgeted as full attention (the engine keeps a full-length
    cache for them: vLLM ``--disable-sliding-window`` / ``--disable-hybrid-kv-cache-manager``, SGLang
    ``--disable-hybrid-swa-memory``)."""
    if not architecture.num_sliding_layers and "sliding_attention" not in (architecture.layer_types or []):
        return architecture
    layers = None if architecture.layer_types is None else ["full_attention"] * len(architecture.layer_types)
    return architecture.model_copy(update={"layer_types": layers, "num_sliding_layers": 0 if layers is None else None})


@dataclass(frozen=True)
class FlagEffects:
    """What the modelled flags of one spec change before budgeting (engine-agnostic part).

    Attributes:
        offload_weights_bytes: weights per GPU the engine keeps in host memory (``--cpu-offload-gb``).
        sliding_as_full: sliding-window layers get a full-length KV cache.
        notes: one sentence per modelled flag, for the plan's reasons.
    """

    offload_weights_bytes: int = 0
    sliding_as_full: bool = False
    notes: tuple[str, ...] = ()
