"""The trainer's clients of the other services: inference, reward, rollout."""
