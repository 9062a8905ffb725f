"""The inference service: vLLM's OpenAI-compatible server behind the fleet's token, serving
each policy as the trainer publishes it (`name@step`)."""
