"""The trainer's own OpenAI-compatible server (`ARTFLEET_INFERENCE_ENGINE=torch`): the
live weights of every model the torch backend trains, with dynamic batching
(scheduler.py, generation.py), a prefix cache, grammars for tools and response formats,
vLLM's token-id extensions, `/v1/completions`, and frozen checkpoints loaded on request
(frozen.py). `TorchServing` (service.py) is its `PolicyServing`. Nothing here is built
when the inference service serves the policy."""
