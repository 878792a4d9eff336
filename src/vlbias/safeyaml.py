"""YAML read safely, wherever vlbias reads it (the config, stimulus files, the weights lock, the
schemas): safe tags only, no key twice in a mapping, no expansion by aliases beyond MAX_NODES.

    doc = load_yaml(text_or_file)     # yaml.YAMLError (a MarkedYAMLError naming the line) otherwise
"""

from typing import IO, Any

import yaml

# what aliases may expand a file to: fifty times the largest shipped stimulus file (about 20,000 nodes)
MAX_NODES = 1_000_000
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MERGE = "tag:yaml.org,2002:merge"


class _Loader(_SafeLoader):
    """Safe YAML (libyaml when present: the grounded stimulus files are large) that refuses a key
    given twice in one mapping, which YAML parsers otherwise resolve silently to the last one, and a
    document whose aliases (``*name``) expand it beyond MAX_NODES: a file of 1.4 kB whose aliases
    nest eight deep stands for 400 million items, which validating and rendering its errors took
    half a minute and gigabytes to find out."""

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            _refuse_expansion(node)
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE:  # `<<: *defaults`: its keys are the mapping's defaults, not given twice
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.MarkedYAMLError("while constructing a mapping", node.start_mark,
                                           f"key '{key}' is given twice (first on line {seen[key] + 1})",
                                           key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else []


def _refuse_expansion(root: Any) -> None:
    """MarkedYAMLError when the tree ``root`` stands for more than MAX_NODES nodes once its aliases
    (nodes met more than once) are expanded, or for an endless one (an alias inside the node it names);
    counted per distinct node, depth first, so a bomb costs its size on disk, not its expansion."""
    size: dict[int, int] = {}
    started: set[int] = set()
    todo = [(root, False)]
    while todo:
        node, done = todo.pop()
        children = _children(node)
        if done:  # every child counted: this node's expansion, capped just past the limit
            size[id(node)] = min(MAX_NODES + 1, 1 + sum(size[id(c)] for c in children))
            if size[id(node)] > MAX_NODES:
                raise yaml.MarkedYAMLError("while reading", None, f"its aliases (*name) expand it to more than "
                                           f"{MAX_NODES:,} items: write them out, or fewer", node.start_mark)
        elif id(node) not in started:
            started.add(id(node))
            todo.append((node, True))
            for child in children:
                if id(child) in started and id(child) not in size:  # started, unfinished: an ancestor
                    raise yaml.MarkedYAMLError("while reading", None, "an alias (*name) of a node inside itself: an "
                                               "endless document", child.start_mark)
                todo.append((child, False))


def load_yaml(stream: str | IO[str]) -> Any:
    """The document in ``stream`` (text or a file): safe YAML, no key twice in a mapping, no expansion
    by aliases beyond MAX_NODES (yaml.YAMLError otherwise)."""
    return yaml.load(stream, Loader=_Loader)
