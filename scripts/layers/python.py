"""The import graph of a Python package (every `import`/`from … import` of its own
modules, anywhere in a file) and its cycles."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from .graph import cycles_of, rel, unit_edge

Path_ = tuple[str, ...]


def python_cycles(label: str, pkg_dir: Path, repo: Path) -> tuple[dict[str, list[str]], list[str]]:
    pkg = pkg_dir.name
    files: dict[Path_, Path] = {}
    packages: set[Path_] = set()
    for f in sorted(pkg_dir.rglob("*.py*")):
        if f.suffix not in (".py", ".pyi") or "__pycache__" in f.parts:
            continue
        parts = f.relative_to(pkg_dir).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
            packages.add(parts)
        files.setdefault(parts, f)
    errors: list[str] = []
    trees: dict[Path_, ast.Module] = {}
    for mod, f in files.items():
        try:
            trees[mod] = ast.parse(f.read_text(encoding="utf-8"), str(f))
        except (OSError, SyntaxError) as e:
            errors.append(f"{label}: cannot parse {f}: {e}")
    # name -> module it comes from, per module (for `from toolgate import X` re-exports)
    imported: dict[Path_, dict[str, Path_]] = defaultdict(dict)
    raw: list[tuple[Path_, Path_, str | None, int]] = []  # (origin, module, name, line)
    for mod, tree in trees.items():
        base = mod if mod in packages else mod[:-1]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    parts = tuple(a.name.split("."))
                    if parts[0] == pkg:
                        raw.append((mod, parts[1:], None, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    up = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                    target = up + tuple((node.module or "").split(".") if node.module else ())
                elif node.module and node.module.split(".")[0] == pkg:
                    target = tuple(node.module.split(".")[1:])
                else:
                    continue
                for a in node.names:
                    raw.append((mod, target, a.name, node.lineno))
                    if a.name != "*":
                        imported[mod][a.asname or a.name] = target
    edges: dict[tuple[Path_, str, str], str] = {}
    for origin, target, name, line in raw:
        resolved = _py_resolve(target, name, files, imported)
        edge = unit_edge(origin, resolved)
        if edge is not None and edge not in edges:
            edges[edge] = f"{rel(files[origin], repo)}:{line}"
    return cycles_of(label, edges), errors


def _py_resolve(
    target: Path_, name: str | None, files: dict[Path_, Path], imported: dict[Path_, dict[str, Path_]]
) -> Path_:
    for _ in range(32):
        if name and target + (name,) in files:
            return target + (name,)
        if name and name in imported.get(target, {}):
            target, name = imported[target][name], name
            continue
        return target
    return target
