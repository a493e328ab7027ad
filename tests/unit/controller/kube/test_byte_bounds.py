"""Every read of engine text and every cached body is bounded in bytes, not lines or entries:
a log tail of one 50 MB line, pod status texts, the Events of a failed pod, env values, a server's kept body."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.api.crd import build_crd
from ctxfit.api.validation import MAX_ENV_BYTES, MAX_ENV_VALUE
from ctxfit.controller.app.lifecycle import MAX_CACHED_BODY_BYTES, keep_body
from ctxfit.controller.kube.client import EVENT_MESSAGE_BYTES, LOG_TAIL_BYTES, Kube
from ctxfit.controller.views.pods import pod_view
from ctxfit.vocab.text import STATUS_TEXT_BYTES
from kubernetes import client
from pydantic import ValidationError

from tests.unit.controller.kube.fakeapi import api_client_over


class Streamed:
    """A urllib3 response of ``size`` bytes, produced chunk by chunk (never held whole), counting what was read."""

    def __init__(self, size: int, status: int = 200, tail: bytes = b"") -> None:
        self.status, self.reason = status, "OK"
        self.headers: dict[str, str] = {}
        self.size, self.tail, self.read_bytes = size, tail, 0

    @property
    def data(self) -> bytes:
        raise AssertionError("a bounded read must not load the whole answer")

    def stream(self, amount: int, decode_content: bool = True) -> Any:
        left = self.size
        while left > 0:
            n = min(amount, left)
            left -= n
            chunk = b"x" * n if left > len(self.tail) or not self.tail else (b"x" * (n - len(self.tail)) + self.tail)
            self.read_bytes += n
            yield chunk

    def release_conn(self) -> None:
        pass


class Pool:
    def __init__(self, response: Any) -> None:
        self.response = response

    def request(self, *_: Any, **__: Any) -> Any:
        return self.response


def kube_with(response: Any) -> Kube:
    return Kube(api_client_over(Pool(response), client.Configuration(host="https://api")), instance="t")


def test_a_log_tail_of_one_50_mb_line_keeps_its_last_bytes_only() -> None:
    answer = Streamed(50 << 20, tail=b"\ntorch.OutOfMemoryError: CUDA out of memory.")
    text = kube_with(answer).log_tail("ns", "pod", "engine", previous=True, lines=200)
    assert len(text.encode()) == LOG_TAIL_BYTES and text.endswith("CUDA out of memory.")
    assert answer.read_bytes == 50 << 20, "read through (its end is what matters), never held"


def test_a_log_head_stops_reading_at_its_limit() -> None:
    answer = Streamed(50 << 20)
    text = kube_with(answer).log_head("ns", "pod", "engine", limit_bytes=1 << 20)
    assert text is not None and len(text) == 1 << 20 and answer.read_bytes < 2 << 20


def test_a_failed_pods_events_are_bounded() -> None:
    many = {"items": [{"reason": "BackOff", "message": "m" * 100_000, "lastTimestamp": f"2026-01-01T00:00:{i:02d}Z"}
                      for i in range(3)]}
    body = json.dumps(many).encode()

    class Small(Streamed):
        def stream(self, amount: int, decode_content: bool = True) -> Any:
            yield body

    messages = kube_with(Small(len(body))).pod_events("ns", "pod")
    assert len(messages) == 3 and all(len(m) <= EVENT_MESSAGE_BYTES + len("BackOff: ") for m in messages)
    huge = kube_with(Streamed(50 << 20)).pod_events("ns", "pod")
    assert huge == [], "a list over its byte bound is not parsed"


def test_pod_status_texts_kept_in_the_index_are_bounded() -> None:
    long = "é" * (1 << 20)
    view = pod_view({"metadata": {"name": "p", "labels": {"ctxfit.io/server": "s"}},
                     "status": {"message": long, "conditions": [{"type": "PodScheduled", "status": "False",
                                                                 "message": long}],
                                "containerStatuses": [{"name": "engine", "restartCount": 1,
                                                       "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                                             "message": long}},
                                                       "lastState": {"terminated": {"exitCode": 1,
                                                                                    "message": long}}}]}})
    for text in (view.message, view.facts.unschedulable_message, view.facts.waiting_message,
                 view.termination.message if view.termination else ""):
        assert 0 < len(text.encode()) <= STATUS_TEXT_BYTES


def test_env_values_are_bounded_in_bytes() -> None:
    base: dict[str, Any] = {"model": {"name": "m", "weightsPerGPU": "1Gi"}, "engine": {"kind": "vllm"},
                            "gpu": {"count": 1}}
    with pytest.raises(ValidationError, match="at most 32768"):
        InferenceServerSpec.model_validate({**base, "engine": {"kind": "vllm", "env": [
            {"name": "X", "value": "x" * (MAX_ENV_VALUE + 1)}]}})
    with pytest.raises(ValidationError, match=f"at most {MAX_ENV_BYTES}"):
        InferenceServerSpec.model_validate({**base, "engine": {"kind": "vllm", "env": [
            {"name": f"X{i}", "value": "x" * MAX_ENV_VALUE} for i in range(3)]}})
    schema = json.dumps(build_crd())
    assert f'"maxLength": {MAX_ENV_VALUE}' in schema, "the CRD refuses one too long at kubectl apply"


def test_a_huge_body_is_not_kept_between_passes() -> None:
    bodies: dict[tuple[str, str], bytes] = {}
    keep_body(bodies, ("ns", "a"), b"x" * 100)
    keep_body(bodies, ("ns", "b"), b"x" * (MAX_CACHED_BODY_BYTES + 1))
    assert list(bodies) == [("ns", "a")]
    keep_body(bodies, ("ns", "a"), b"x" * (MAX_CACHED_BODY_BYTES + 1))
    assert bodies == {}, "a body grown past the bound drops the older one too"
