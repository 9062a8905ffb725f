"""YAML as people write spec files (a job spec, a HUD config.yaml, a list of scorers):
safe-loaded, and a key given twice in one mapping is an error naming the key and both
lines. PyYAML alone keeps the last value silently, so a second `steps:` further down a long
file would quietly win."""

from __future__ import annotations

from typing import Any

import yaml

from artfleet.contracts.errors import InvalidArgument

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKey(InvalidArgument):
    """A mapping with a key given twice; the message names the source, line and key."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with a repeated key. Merge keys (`<<: *base`) are
    left alone: keys written out beside a merge override it, as YAML intends."""

    source = "<yaml>"

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeLoader reports it
                    continue
                if first is not None:
                    raise DuplicateKey(
                        f"{self.source}:{line}: duplicate key {key!r} (first at line {first})"
                    )
                seen[key] = line
        return super().construct_mapping(node, deep)  # type: ignore[arg-type]


def load_yaml(text: str, source: str = "<yaml>") -> Any:
    """The document in `text`; DuplicateKey (an InvalidArgument) for a key given twice,
    yaml.YAMLError for text that is not YAML."""
    loader = _UniqueKeyLoader(text)
    loader.source = source
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
