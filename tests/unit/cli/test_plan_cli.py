"""``ctxfit plan``: output formats, exit codes 0/3/2, one clear error line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.unit.cli.clikit import ROOT, run_cli


def test_table_output_kimi() -> None:
    out = run_cli("plan", "-f", "manifests/kimi-128k.yaml")
    assert out.returncode == 0, out.stderr
    for text in ("weights", "70.80", "KV pool", "70,272", "131,072", "--max-model-len 131072"):
        assert text in out.stdout


def test_json_keys_are_stable() -> None:
    out = run_cli("plan", "-f", "manifests/kimi-128k.yaml", "-o", "json")
    doc = json.loads(out.stdout)
    assert {
        "fits",
        "contextLength",
        "maxContextLength",
        "kvBytesPerToken",
        "perGPU",
        "engineArgs",
        "effective",
        "reasons",
    } <= set(doc)
    assert set(doc["perGPU"]) == {
        "totalBytes",
        "usableBytes",
        "weightsBytes",
        "activationBytes",
        "cudaGraphBytes",
        "otherBytes",
        "kvCacheBytes",
    }
    assert set(doc["effective"]) == {
        "contextLength",
        "gpuMemoryUtilization",
        "memFractionStatic",
        "kvCacheDtype",
        "maxNumSeqs",
        "cudaGraphMaxBatchSize",
        "memoryLimit",
        "shmSize",
        "startupTimeoutSeconds",
    }
    assert doc["engineArgs"][doc["engineArgs"].index("--max-model-len") + 1] == "131072"
    assert doc["effective"]["memoryLimit"] == "500Gi"


def test_yaml_output() -> None:
    out = run_cli("plan", "-f", "manifests/dsv4-flash-512k.yaml", "-o", "yaml")
    assert out.returncode == 0
    assert yaml.safe_load(out.stdout)["contextLength"] == 524288


def test_does_not_fit_exits_3_with_reasons(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "manifests" / "glm5-200k.yaml").read_text())
    doc["spec"]["model"]["weightsPerGPU"] = "90.8Gi"
    path = tmp_path / "glm5.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = run_cli("plan", "-f", str(path), "-o", "json")
    assert out.returncode == 3
    result = json.loads(out.stdout)
    assert result["fits"] is False and result["reasons"]


def _mutate(tmp_path: Path, edit: dict[str, object]) -> Path:
    doc = yaml.safe_load((ROOT / "manifests" / "kimi-128k.yaml").read_text())
    for dotted, value in edit.items():
        node = doc
        keys = dotted.split(".")
        for key in keys[:-1]:
            node = node[key]
        if value is None:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ({"spec.gpu.product": "NVIDIA-Imaginary-9000", "spec.gpu.memory": None}, "spec.gpu.memory"),
        ({"spec.parallelism.tensor": 3}, "tensor x pipeline x data must equal gpu.count"),
        ({"spec.gpu.memory": "-5Gi"}, "gpu.memory"),
        ({"spec.model.weightsPerGPU": "90Ti"}, "weightsPerGPU"),
        ({"spec.resources.memory": "abc"}, "resources.memory"),
        ({"spec.model.name": "acme/unknown", "spec.model.weightsPerGPU": "1Gi"}, "acme/unknown: ModelNotFound"),
        ({"spec.engine.kind": "tgi"}, "engine.kind"),
        ({"spec.context.minimum": 300000}, "context.minimum"),
        ({"spec.memory.memFractionStatic": 0.8}, "memFractionStatic"),
        ({"spec.gpu.count": 0}, "gpu.count"),
        ({"spec.unknownField": 1}, "unknownField"),
    ],
    ids=[
        "unknown-gpu",
        "tp-not-dividing",
        "negative-memory",
        "absurd-weights",
        "bad-quantity",
        "unknown-model",
        "bad-engine",
        "minimum-above-target",
        "wrong-engine-knob",
        "zero-gpus",
        "unknown-field",
    ],
)
def test_bad_input_exit_2_one_line(tmp_path: Path, edit: dict[str, object], needle: str) -> None:
    out = run_cli("plan", "-f", str(_mutate(tmp_path, edit)))
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert needle in lines[0]
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "content",
    ["", "spec: [1, 2", "kind: Deployment\nspec: {}\n", "just a string"],
    ids=["empty", "bad-yaml", "wrong-kind", "scalar"],
)
def test_unreadable_manifest(tmp_path: Path, content: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(content)
    out = run_cli("plan", "-f", str(path))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1


def test_missing_file() -> None:
    out = run_cli("plan", "-f", "/nonexistent/server.yaml")
    assert out.returncode == 2 and "cannot read" in out.stderr


def test_hf_config_file(tmp_path: Path) -> None:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
        "vocab_size": 128256,
        "intermediate_size": 14336,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    doc = {
        "apiVersion": "ctxfit.io/v1alpha1",
        "kind": "InferenceServer",
        "metadata": {"name": "x"},
        "spec": {
            "model": {"name": "acme/my-llama", "weightsPerGPU": "15Gi"},
            "engine": {"kind": "vllm"},
            "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"},
        },
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    out = run_cli("plan", "-f", str(tmp_path / "s.yaml"), "--hf-config", str(tmp_path / "config.json"), "-o", "json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["kvBytesPerToken"] == 131072 and result["contextLength"] == 131072


def test_readme_shows_the_real_plan_output() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    marker = "$ ctxfit plan -f manifests/kimi-128k.yaml\n"
    shown = readme.split(marker, 1)[1].split("```", 1)[0]
    out = run_cli("plan", "-f", "manifests/kimi-128k.yaml")
    assert out.returncode == 0

    def norm(text: str) -> list[str]:
        return [line.rstrip() for line in text.strip().splitlines()]

    assert norm(shown) == norm(out.stdout)


def test_plan_prints_the_weights_cache_and_its_size() -> None:
    out = run_cli("plan", "-f", "manifests/kimi-128k.yaml")
    assert "weights cache: volumeClaimTemplate: claim kimi-k25-weights of 615Gi" in out.stdout
    doc = json.loads(run_cli("plan", "-f", "manifests/kimi-128k.yaml", "-o", "json").stdout)
    assert doc["cache"]["mode"] == "volumeClaimTemplate" and doc["cache"]["sizeBytes"] == 615 * (1 << 30)
    bare = json.loads(run_cli("plan", "-f", "manifests/kimi-128k.yaml", "-o", "json",
                              "--no-default-storage-class").stdout)
    assert bare["cache"]["mode"] == "emptyDir" and "every attempt downloads" in bare["cache"]["note"]
