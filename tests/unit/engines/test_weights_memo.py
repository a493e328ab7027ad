"""``checkpoint_weights`` remembers its answers per live checkpoint (engines/weights.py ``_MEMO``): the same inputs
give the same answer without a second estimate, any input that changes the estimate gives a fresh one, and the
memo goes with the checkpoint."""

from __future__ import annotations

import copy
import gc
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.engines import weights

from tests.hubfixtures.repos import fixture_repo

REPO = "Qwen/Qwen2.5-7B"


def spec(**over: Any) -> InferenceServerSpec:
    body: dict[str, Any] = {"model": {"name": REPO}, "engine": {"kind": "vllm", "version": "0.19.0"},
                            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}}
    for key, value in over.items():
        body[key] = value
    return InferenceServerSpec.model_validate(body)


def test_the_same_inputs_are_estimated_once_and_changed_inputs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    repo = fixture_repo(REPO)
    checkpoint, config = repo.checkpoint(), repo.config
    calls: list[tuple[int, str]] = []
    real = weights.estimate_weights

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append((args[2].tp, kw.get("dtype", "auto")))
        return real(*args, **kw)
    monkeypatch.setattr(weights, "estimate_weights", counting)
    one = weights.checkpoint_weights(spec(), checkpoint, config)
    assert weights.checkpoint_weights(spec(), checkpoint, config) == one and len(calls) == 1
    two_gpus = spec(gpu={"product": "NVIDIA-H100-80GB-HBM3", "count": 2}, parallelism={"tensor": 2})
    halved = weights.checkpoint_weights(two_gpus, checkpoint, config)
    assert halved is not None and one is not None and halved[0] < one[0] and len(calls) == 2
    fp32 = weights.checkpoint_weights(spec(engine={"kind": "vllm", "version": "0.19.0",
                                                   "args": ["--dtype", "float32"]}), checkpoint, config)
    assert fp32 is not None and fp32[0] > one[0] and len(calls) == 3
    sglang = weights.checkpoint_weights(spec(engine={"kind": "sglang", "version": "0.5.2"}), checkpoint, config)
    assert sglang is not None and len(calls) == 4
    edited = copy.deepcopy(config)  # another config object (the same checkpoint): estimated again
    edited["tie_word_embeddings"] = not config.get("tie_word_embeddings", False)
    other = weights.checkpoint_weights(spec(), checkpoint, edited)
    assert len(calls) == 5 and other != one
    assert weights.checkpoint_weights(spec(), checkpoint, config) == one and len(calls) == 5


def test_the_memo_goes_with_its_checkpoint() -> None:
    repo = fixture_repo(REPO)
    checkpoint = repo.checkpoint()
    ident = id(checkpoint)
    assert weights.checkpoint_weights(spec(), checkpoint, repo.config) is not None
    assert ident in weights._MEMO
    del checkpoint
    gc.collect()
    assert ident not in weights._MEMO
