"""What an API server's error answer means: the one place the controller reads HTTP status codes of
``ApiException`` (a refused write, 400/403/422, is ``rejections.py``'s). Kubernetes API conventions:
404 NotFound, 409 AlreadyExists (a create) or Conflict (a stale ``resourceVersion`` or uid precondition),
410 Gone (an expired resourceVersion), 422 Invalid (also a failed JSON-patch ``test`` operation).
docs/design/ownership.md."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException


def succeeded(status: int) -> bool:
    """A 2xx HTTP status (anything else is raised as ``ApiException``)."""
    return 200 <= status <= 299


def not_found(exc: ApiException) -> bool:
    """A 404: the object, or its resource type (``resource_missing``), is not there."""
    return bool(exc.status == 404)


def resource_missing(exc: ApiException) -> bool:
    """A 404 for the resource type, not for one object: the API server's ``Status`` ``details`` name no object
    (kube-apiserver's answer for a resource it does not serve, seen in tests/e2e/test_autoscaling_operator.py).
    An unreadable body counts as the type missing."""
    if not not_found(exc):
        return False
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (ValueError, TypeError):
        return True
    details = body.get("details") if isinstance(body, dict) else None
    return not (isinstance(details, dict) and details.get("name"))


def object_gone(exc: ApiException) -> bool:
    """A 404 for the object (its resource type is served)."""
    return not_found(exc) and not resource_missing(exc)


def conflict(exc: ApiException) -> bool:
    """A 409: the name is taken (a create), or the object changed since it was read (a PUT with its
    ``resourceVersion``, a delete with a uid precondition)."""
    return bool(exc.status == 409)


def expired(exc: ApiException) -> bool:
    """A 410 Gone: a list or watch from a resourceVersion the API server no longer keeps (list again); a watch
    sends it as an ``ERROR`` event whose ``Status`` carries the code."""
    return bool(exc.status == 410)


def invalid(exc: ApiException) -> bool:
    """A 422: the request is invalid, a failed JSON-patch ``test`` operation included."""
    return bool(exc.status == 422)


def server_error(exc: ApiException) -> bool:
    """A 5xx, or no HTTP status at all (the connection failed before an answer): worth trying again later."""
    return (exc.status or 500) >= 500
