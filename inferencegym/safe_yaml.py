"""The one YAML loader of the project: safe tags only, bounded size, bounded alias expansion.

Every YAML the project reads (training configs, ``--set`` values, Tune sweeps, tenant mixes,
``simulate --config``) goes through :func:`load_yaml` / :func:`read_yaml`. On top of
``yaml.SafeLoader`` (no ``!!python`` tags) it refuses, with a one-line :class:`YamlInputError`:

- a document larger than :data:`MAX_YAML_BYTES`;
- a document whose node graph, with every alias expanded, has more than :data:`MAX_YAML_NODES`
  nodes (the "billion laughs": a 550-byte file of nested aliases expands to 10^9 strings; PyYAML
  builds it as shared objects, but whatever walks it afterwards - validation, ``copy``, an error
  message - pays the expanded size). The expanded size is counted on the composed node graph
  with one memo per node, so the check costs the size of the file, not of the expansion;
- nesting deeper than :data:`MAX_YAML_DEPTH` and recursive aliases (``&a [*a]``).

It lives at the package root, outside the layers, and imports nothing of the package, so every
layer may use it. :func:`short` bounds any value echoed in an error message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MAX_YAML_BYTES = 1 << 20
"""Largest YAML document read (1 MiB; the project's configs are < 5 kB)."""
MAX_YAML_NODES = 100_000
"""Most nodes a document may expand to, aliases counted at every use."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of mappings and sequences."""
ECHO_CHARS = 80
"""Characters of a value echoed in an error message, at most."""


class YamlInputError(ValueError):
    """A YAML document that is refused: not YAML, too large, too deep or expanding too much."""


def short(value: Any, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters (never walks more of ``value`` than needed for
    a scalar; containers are summarised by type and length)."""
    if isinstance(value, (dict, list, tuple, set)):
        return f"<{type(value).__name__} of {len(value)} items>"
    s = repr(value)
    return s if len(s) <= limit else s[:limit] + "..."


def _expanded_size(root: Any, where: str) -> None:
    """Raise :class:`YamlInputError` when ``root`` expands past the node or depth bounds."""
    import yaml

    memo: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, depth)
    on_path: set[int] = set()
    # iterative post-order walk (a deep document must not exhaust Python's recursion either)
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            if isinstance(node, yaml.MappingNode):
                kids = [k for pair in node.value for k in pair]
            else:
                kids = list(node.value)
            size = 1 + sum(memo[id(k)][0] for k in kids)
            depth = 1 + max((memo[id(k)][1] for k in kids), default=0)
            if size > MAX_YAML_NODES:
                raise YamlInputError(f"{where}: the document expands to more than {MAX_YAML_NODES:,} "
                                     "values (aliases counted at every use); refusing it")
            if depth > MAX_YAML_DEPTH:
                raise YamlInputError(f"{where}: nested deeper than {MAX_YAML_DEPTH} levels; refusing it")
            memo[key] = (size, depth)
            continue
        if key in memo:
            continue
        if not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            memo[key] = (1, 0)
            continue
        if key in on_path:
            raise YamlInputError(f"{where}: a recursive alias (an anchor used inside itself); refusing it")
        on_path.add(key)
        stack.append((node, True))
        if len(on_path) > MAX_YAML_DEPTH:
            raise YamlInputError(f"{where}: nested deeper than {MAX_YAML_DEPTH} levels; refusing it")
        kids = [k for pair in node.value for k in pair] if isinstance(node, yaml.MappingNode) else node.value
        for k in kids:
            if id(k) in on_path:
                raise YamlInputError(f"{where}: a recursive alias (an anchor used inside itself); "
                                     "refusing it")
            if id(k) not in memo:
                stack.append((k, False))


def load_yaml(text: str | bytes, where: str = "<yaml>") -> Any:
    """Parse one YAML document safely (see the module docstring); ``where`` names it in errors."""
    import yaml

    if len(text) > MAX_YAML_BYTES:
        raise YamlInputError(f"{where}: {len(text):,} bytes; a YAML document may have at most "
                             f"{MAX_YAML_BYTES:,}")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise YamlInputError(f"{where}: not UTF-8 text (byte {exc.start + 1})") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        msg = " ".join(str(exc).split())
        raise YamlInputError(f"{where}: not valid YAML (python tags are refused): "
                             f"{msg[:200] + ' ...' if len(msg) > 200 else msg}") from None
    except RecursionError:
        raise YamlInputError(f"{where}: nested deeper than {MAX_YAML_DEPTH} levels; refusing it") from None
    finally:
        loader.dispose()


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    """:func:`load_yaml` of a file; a missing file, a folder or an oversized file fail in one line."""
    p = Path(path)
    if not p.exists():
        raise YamlInputError(f"{what} not found: {p}")
    if p.is_dir():
        raise YamlInputError(f"{what} {p} is a folder; give a YAML file")
    size = p.stat().st_size
    if size > MAX_YAML_BYTES:
        raise YamlInputError(f"{p}: {size:,} bytes; a YAML document may have at most {MAX_YAML_BYTES:,}")
    with open(p, "rb") as f:
        return load_yaml(f.read(MAX_YAML_BYTES + 1), str(p))


__all__ = ["load_yaml", "read_yaml", "short", "YamlInputError", "MAX_YAML_BYTES", "MAX_YAML_NODES",
           "MAX_YAML_DEPTH"]
