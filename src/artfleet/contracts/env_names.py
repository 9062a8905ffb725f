"""How a spec or a setting names an environment variable a service reads (a judge's
`api_key_env`, a settings map's variables): a name as a shell accepts it. Keys are read
from the environment by name and never travel."""

from __future__ import annotations

import re

ENV_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
