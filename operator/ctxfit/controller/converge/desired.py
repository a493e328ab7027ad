"""The children the pass wants (pure): the Deployment or LeaderWorkerSet and the Service of the newest attempt,
compared with what runs (template hash, replicas, drift), or scale to 0 after a permanent failure. A new
child object is rendered here and applied by ``reconcile``."""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import (
    Phase,
    Reason,
    parse_rfc3339,
)
from ctxfit.render import RenderInput, endpoint_url
from ctxfit.render.cache import CacheVolume
from ctxfit.render.deployment import CONTAINER_NAME, render_pod_template
from ctxfit.render.leaderworkerset import render_service_for, render_workload

from ..settings import Settings
from ..views.nodes import failed_driver_nodes, required_cuda
from ..views.pod_facts import engine_digest
from ..views.workloads import describe_drift, drifted
from .autoscaling import leave_replicas, wanted_replicas
from .types import EventNote, Outcome, Snapshot

SERVICE_DELAY_SECONDS = 1.0
"""A new server's Service is created on the pass after its Deployment (the engine starts first)."""

def render_input(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings,
                  cache: CacheVolume | None = None) -> RenderInput:
    st = out.status
    cur = st.current_attempt
    assert cur is not None
    image = settings.image_for(spec.engine.kind.value)
    return RenderInput(
        name=snap.name, namespace=snap.namespace, uid=snap.uid, spec=spec, effective=cur.effective.to_config(),
        attempt=cur.number, gpu_product=st.node_product, image=image,
        replicas=wanted_replicas(spec, snap.deployment, st.phase is Phase.FAILED, snap.scaling).count,
        avoid_nodes=tuple(failed_driver_nodes(st.attempts)), min_cuda=required_cuda(spec, image), cache=cache,
    )


def desired_digest(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings,
                    cache: CacheVolume | None = None) -> str:
    """``views.pod_facts.engine_digest`` of the current attempt's engine container (pods of another template are
    ignored)."""
    inp = render_input(snap, spec, out, settings, cache)
    if spec.nodes > 1:  # the digest is of the base template, not of the leader's or the workers'
        return engine_digest(render_pod_template(inp)["spec"]["containers"][0])
    deployment = render_workload(inp)
    out.rendered = (inp, deployment)
    return engine_digest(deployment["spec"]["template"]["spec"]["containers"][0])


def desired(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings,
             cache: CacheVolume | None = None) -> None:
    """Render the Deployment/Service for the newest attempt (or scale to 0 after a permanent failure)."""
    st = out.status
    cur = st.current_attempt
    if cur is None:
        if snap.deployment is not None and snap.deployment.replicas != 0 and st.phase is Phase.FAILED:
            out.scale_to_zero = True
        return
    st.effective = cur.effective
    # the CONTEXT column says what runs: nothing while Failed (scaled to 0); ``effective`` keeps what was tried
    st.context_length = None if st.phase is Phase.FAILED else cur.effective.context_length
    inp = render_input(snap, spec, out, settings, cache)
    if cur.not_before is not None and st.phase is not Phase.FAILED:
        wait = (parse_rfc3339(cur.not_before) - snap.now).total_seconds()
        if wait > 0:
            out.requeue(wait)
            return
    deployment = out.rendered[1] if out.rendered is not None and out.rendered[0] == inp else render_workload(inp)
    out.rendered = None
    want_hash = deployment["metadata"]["annotations"]["ctxfit.io/pod-template-hash"]
    have = snap.deployment
    write_replicas = wanted_replicas(spec, have, st.phase is Phase.FAILED, snap.scaling).write
    if have is None or have.template_hash != want_hash or (write_replicas and
                                                          have.replicas != deployment["spec"]["replicas"]):
        if not (have is None and st.phase is Phase.FAILED):
            out.deployment = deployment
    elif have.live is not None and (changed := drifted(deployment, have.live, CONTAINER_NAME)):
        out.deployment = deployment
        out.events.append(EventNote("Warning", Reason.DRIFT_REVERTED, f"reverted a change to {deployment['kind']} "
                                    f"{snap.name}: {describe_drift(changed, deployment, have.live, CONTAINER_NAME)}"))
    if out.deployment is not None and not write_replicas:
        leave_replicas(out.deployment)
    if snap.service_port != spec.serving.port and st.phase is not Phase.FAILED:
        if have is None:  # Service after the Deployment: a ClusterIP allocation is the slowest write
            out.requeue(SERVICE_DELAY_SECONDS)
        else:
            out.service = render_service_for(inp)
    st.endpoint = endpoint_url(snap.name, snap.namespace, spec.serving.port)
