"""The package's modules import one way (issue 15): a module names only modules of a
lower layer, imports nothing private of another module, and imports at its top."""

from __future__ import annotations

import ast
from pathlib import Path

import toolgate

PACKAGE = Path(toolgate.__file__).parent

# Lowest first. A module may import modules of lower layers only, never one of its own
# layer or a higher one; a new module must be placed here.
LAYERS: list[set[str]] = [
    {"_toolgate"},  # the native engine
    {"_errors", "_config", "_urgency"},  # the exception; config values and their checks; a call's priority and deadline
    {"_permits"},  # what every way of admitting shares: waiting, holding, finishing
    {"_policy", "_gateway"},  # ToolRateLimitPolicy; the gateway's requests and answers
    {"middleware", "langchain", "openai_agents", "testing", "_client", "_async_client", "mesh", "adk"},  # adapters, clients
    {"__init__"},
]
LAYER = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def modules() -> dict[str, ast.Module]:
    """Every module of the package, by name (the native one by its stub)."""
    files = sorted([*PACKAGE.glob("*.py"), *PACKAGE.glob("*.pyi")])
    return {p.stem: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in files}


def package_imports(tree: ast.Module) -> list[tuple[str, list[str], int]]:
    """Every import of a module of this package, anywhere in the file: (module, the
    names taken from it, line)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            relative = node.level == 1
            absolute = node.level == 0 and (node.module or "").split(".")[0] == "toolgate"
            if not (relative or absolute):
                continue
            parts = (node.module or "").split(".")
            module = parts[0] if relative else (parts[1] if len(parts) > 1 else "")
            if module:
                found.append((module, [a.name for a in node.names], node.lineno))
            else:  # `from . import x`: x is a module
                found.extend((a.name, [], node.lineno) for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "toolgate" and len(parts) > 1:
                    found.append((parts[1], [], node.lineno))
    return found


def test_every_module_of_the_package_has_a_layer() -> None:
    assert set(modules()) == set(LAYER), "place each module in LAYERS"


def test_modules_import_only_modules_of_a_lower_layer() -> None:
    wrong = [
        f"{name}.py:{line} imports {target} (layer {LAYER.get(target)} >= {LAYER[name]})"
        for name, tree in modules().items()
        for target, _, line in package_imports(tree)
        if LAYER.get(target, len(LAYERS)) >= LAYER[name]
    ]
    assert wrong == []


def test_no_module_imports_a_private_name_of_another_module() -> None:
    wrong = [
        f"{name}.py:{line} imports {n} from {target}"
        for name, tree in modules().items()
        for target, names, line in package_imports(tree)
        for n in names
        if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))
    ]
    assert wrong == []


def test_imports_come_before_the_first_definition() -> None:
    wrong = []
    for name, tree in modules().items():
        first_def = next(
            (n.lineno for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))),
            None,
        )
        if first_def is None:
            continue
        for stmt in tree.body:
            imports = [n for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))]
            is_def = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            wrong += [f"{name}.py:{n.lineno}" for n in imports if not is_def and n.lineno > first_def]
    assert wrong == []
