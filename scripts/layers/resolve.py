"""Rust name resolution: the module that defines what a path names, re-exports and
globs followed; and the cycles of one crate root."""

from __future__ import annotations

from pathlib import Path

from .graph import cycles_of, rel, unit_edge
from .rust import Module, Path_, RustCrate


# --- Rust name resolution -------------------------------------------------------------


class Resolver:
    def __init__(self, modules: dict[Path_, Module]):
        self.modules = modules

    def absolute(self, origin: Path_, segs: list[str]) -> list[str] | None:
        """The path from the crate root, or None when it leaves the crate."""
        here = list(origin)
        i = 0
        if segs and segs[0] == "crate":
            here, i = [], 1
        else:
            while i < len(segs) and segs[i] in ("super", "self"):
                if segs[i] == "super":
                    if not here:
                        return None
                    here.pop()
                i += 1
            if i == 0:
                module = self.modules.get(origin)
                first = segs[0] if segs else ""
                if module is None or not (
                    first in module.children or first in module.items or first in module.uses
                ):
                    return None  # an external crate (std, tokio, ...)
        return here + segs[i:]

    def module_of(self, abs_path: list[str], depth: int = 0) -> Path_:
        """The module that defines what `abs_path` names (re-exports followed)."""
        cur: Path_ = ()
        for k, seg in enumerate(abs_path):
            module = self.modules.get(cur)
            if module is None:
                return cur
            if seg in module.children:
                cur = cur + (seg,)
                continue
            if depth > 32 or seg in module.items:
                return cur
            if seg in module.uses:
                target = self.absolute(cur, module.uses[seg])
                if target is None:
                    return cur  # a re-exported external item: it lives here for us
                return self.module_of(target + abs_path[k + 1 :], depth + 1)
            for glob in module.globs:
                base = self.absolute(cur, glob)
                if base is None:
                    continue
                src = self.modules.get(self.module_of(base, depth + 1))
                if src is not None and src.path != cur and (
                    seg in src.children or seg in src.items or seg in src.uses
                ):
                    return self.module_of(list(src.path) + abs_path[k:], depth + 1)
            return cur
        return cur


def rust_cycles(label: str, root_file: Path, repo: Path) -> tuple[dict[str, list[str]], list[str]]:
    crate = RustCrate(label, root_file)
    resolver = Resolver(crate.modules)
    edges: dict[tuple[Path_, str, str], str] = {}
    for ref in crate.refs:
        abs_path = resolver.absolute(ref.origin, ref.segments)
        if abs_path is None:
            continue
        edge = unit_edge(ref.origin, resolver.module_of(abs_path))
        if edge is not None and edge not in edges:
            edges[edge] = f"{rel(ref.file, repo)}:{ref.line}"
    return cycles_of(label, edges), crate.errors
