"""Shared helper for the CLI diagnosis tests on fixture logs: the one-GPU manifest `ctxfit diagnose -f` reads."""

from __future__ import annotations

from pathlib import Path

SERVER = """apiVersion: ctxfit.io/v1alpha1
kind: InferenceServer
metadata: {{name: t}}
spec:
  model: {{name: meta-llama/Llama-3.1-8B-Instruct}}
  engine: {{kind: {engine}, version: "{version}"}}
  gpu: {{count: 1, product: NVIDIA-H100-80GB-HBM3}}
  context: {{target: 32768}}
  memory: {{{knob}: 0.9}}
"""


def write_server(path: Path, engine: str, version: str) -> Path:
    """Write an InferenceServer of ``engine`` ("vllm" or "sglang") at ``version`` to ``path`` with the engine's
    own utilization knob at 0.9 (SGLang: memFractionStatic, vLLM: gpuMemoryUtilization); returns ``path``."""
    knob = "memFractionStatic" if engine == "sglang" else "gpuMemoryUtilization"
    path.write_text(SERVER.format(engine=engine, version=version, knob=knob))
    return path
