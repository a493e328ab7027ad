"""``ctxfit plan``'s inference-gateway lines: the pool, the served model name and the labels the pods will carry."""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec
from ctxfit.budget.planner import Plan
from ctxfit.render.inferencepool import CONTEXT_RANGE_LABEL, context_range, server_ports


def plan_routing(spec: InferenceServerSpec, result: Plan, name: str) -> tuple[list[str], dict[str, object] | None]:
    """(human lines, ``-o json`` ``routing`` object with ``status.routing``'s keys); ([], None) without a pool.

    The context is the plan's; once the engine runs, the operator lowers the pods' labels to what it reports
    serving (``status.routing.contextLength``).
    """
    pool = spec.routing.inference_pool
    if pool is None:
        return [], None
    served = spec.routing.served_name(spec.model.name)
    ports = list(server_ports(spec))
    role = "Created" if pool.creates else "Joined"
    doc: dict[str, object] = {"pool": pool.pool_name(name), "role": role, "servedModelName": served,
                              "targetPorts": ports}
    how = "creates InferencePool" if pool.creates else "joins InferencePool"
    if not result.fits:
        return [f"routing: {how} {pool.pool_name(name)} as {served!r}; no context fits, so no pod joins it"], doc
    tokens = result.context_length
    doc |= {"contextLength": tokens, "contextRange": context_range(tokens)}
    where = "the leader of each group" if spec.nodes > 1 else "each pod"
    return [f"routing: {how} {pool.pool_name(name)} as {served!r}; {where} serves on port"
            f"{'s' if len(ports) > 1 else ''} {', '.join(map(str, ports))}, labelled "
            f"{CONTEXT_RANGE_LABEL}={context_range(tokens)}"], doc
