"""Pure rendering: spec + effective configuration -> Deployment, Service, PodMonitor as plain dicts.

No kopf, no Kubernetes API client: the controller applies what this returns. Output is
deterministic (stable key order, sorted labels/annotations) and the Deployment carries a hash of the
pod template so an unchanged plan means no write.
"""

from .deployment import (
    RenderInput,
    engine_image,
    image_for,
    render_deployment,
    render_pod_template,
    startup_failure_threshold,
)
from .labels import (
    ATTEMPT_ANNOTATION,
    ENGINE_LABEL,
    SERVER_LABEL,
    TEMPLATE_HASH_ANNOTATION,
    common_labels,
    effective_annotations,
    template_hash,
)
from .service import endpoint_url, render_pod_monitor, render_service

__all__ = [
    "ATTEMPT_ANNOTATION", "ENGINE_LABEL", "SERVER_LABEL", "TEMPLATE_HASH_ANNOTATION", "RenderInput",
    "common_labels", "effective_annotations", "endpoint_url", "engine_image", "image_for", "render_deployment",
    "render_pod_monitor", "render_pod_template", "render_service", "startup_failure_threshold",
    "template_hash",
]
