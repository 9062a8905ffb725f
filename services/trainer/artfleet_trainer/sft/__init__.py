"""A job's SFT phase (the offline warm-start) and the samples it reads."""
