"""What a person writes: the job spec (`job`), its reward (`reward`, with the built-in
scorers' params in `scorer_params`), GRPO and SFT blocks, HUD's config shapes, and the
answer check. Pydantic models hold every field and default once; the CLI, the HTTP API,
the trainer and the reward service validate with them. Imports only `artfleet.contracts`.
"""
