"""The module graph: which sibling modules an import links, and its cycles."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

Path_ = tuple[str, ...]


def rel(f: Path, repo: Path) -> str:
    try:
        return str(f.relative_to(repo))
    except ValueError:
        return str(f)


def unit_edge(origin: Path_, target: Path_) -> tuple[Path_, str, str] | None:
    """(scope, from, to) between siblings, or None for containment."""
    k = 0
    while k < min(len(origin), len(target)) and origin[k] == target[k]:
        k += 1
    if k == len(origin) or k == len(target):
        return None
    return origin[:k], origin[k], target[k]


def cycles_of(label: str, edges: dict[tuple[Path_, str, str], str]) -> dict[str, list[str]]:
    """Strongly connected components (size >= 2) as allowed-file lines -> evidence."""
    by_scope: dict[Path_, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for scope, a, b in edges:
        by_scope[scope][a].add(b)
    found: dict[str, list[str]] = {}
    for scope, graph in by_scope.items():
        for comp in _sccs(graph):
            names = sorted("::".join(scope + (m,)) for m in comp)
            evidence = sorted(
                f"  {'::'.join(scope + (a,))} -> {'::'.join(scope + (b,))}  ({where})"
                for (s, a, b), where in edges.items()
                if s == scope and a in comp and b in comp
            )
            found[f"{label}: {' '.join(names)}"] = evidence
    return found


def _sccs(graph: dict[str, set[str]]) -> list[set[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out
