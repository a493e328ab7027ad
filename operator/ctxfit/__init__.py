"""ctxfit: deploy LLM inference servers (vLLM, SGLang) sized to the GPUs they land on."""

__version__ = "0.1.0"
