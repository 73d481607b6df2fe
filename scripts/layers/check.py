"""The check: every crate root and Python package of the repository, against the list
of known cycles."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .python import python_cycles
from .resolve import rust_cycles


def _package_name(cargo_toml: Path) -> str:
    m = re.search(r'^\s*name\s*=\s*"([^"]+)"', cargo_toml.read_text(encoding="utf-8"), re.M)
    return m.group(1) if m else cargo_toml.parent.name


def find_cycles(repo: Path) -> tuple[dict[str, list[str]], list[str]]:
    found: dict[str, list[str]] = {}
    errors: list[str] = []
    for cargo in sorted(repo.glob("crates/*/Cargo.toml")):
        crate_dir, name = cargo.parent, _package_name(cargo)
        roots = [(name, crate_dir / "src/lib.rs")]
        roots.append((f"{name} (bin main)", crate_dir / "src/main.rs"))
        roots += [(f"{name} (bin {f.stem})", f) for f in sorted(crate_dir.glob("src/bin/*.rs"))]
        for label, root in roots:
            if root.is_file():
                cycles, errs = rust_cycles(label, root, repo)
                found.update(cycles)
                errors += errs
        for init in sorted(crate_dir.glob("python/*/__init__.py")):
            cycles, errs = python_cycles(f"python {init.parent.name}", init.parent, repo)
            found.update(cycles)
            errors += errs
    return found, errors


def read_allowed(path: Path) -> tuple[list[str], list[str]]:
    lines: list[str] = []
    errors: list[str] = []
    if not path.exists():
        return lines, errors
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        label, sep, mods = line.partition(": ")
        names = mods.split()
        if not sep or len(names) < 2:
            errors.append(f"{path}:{n}: expected `<crate>: <module> <module> ...`: {raw!r}")
            continue
        lines.append(f"{label}: {' '.join(sorted(names))}")
    return lines, errors


def check(repo: Path, allowed_file: Path) -> tuple[int, list[str]]:
    """(exit status, messages) of the whole check."""
    found, errors = find_cycles(repo)
    allowed, allowed_errors = read_allowed(allowed_file)
    errors += allowed_errors
    if errors:
        return 2, errors
    out: list[str] = []
    for line, evidence in sorted(found.items()):
        if line not in allowed:
            out.append(f"import cycle not in {allowed_file.name}: {line}")
            out.extend(evidence)
    for line in allowed:
        if line not in found:
            out.append(
                f"{allowed_file.name} lists a cycle that no longer exists (remove or shrink the "
                f"line): {line}"
            )
    return (1 if out else 0), out


def main(argv: list[str], doc: str) -> int:
    """The command line of scripts/check-layers, whose `doc` is its help text."""
    repo_root = Path(__file__).resolve().parent.parent.parent
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--root", type=Path, default=repo_root)
    ap.add_argument("--allowed", type=Path, default=None)
    ap.add_argument("--print", action="store_true", dest="print_")
    args = ap.parse_args(argv)
    repo = args.root.resolve()
    allowed = args.allowed or repo / "scripts/layers-allowed.txt"
    if args.print_:
        found, errors = find_cycles(repo)
        for line, evidence in sorted(found.items()):
            print(line)
            print("\n".join(f"#{e}" for e in evidence))
        for e in errors:
            print(e, file=sys.stderr)
        return 2 if errors else 0
    status, messages = check(repo, allowed)
    for m in messages:
        print(m, file=sys.stderr if status else sys.stdout)
    if status == 0:
        print(f"check-layers: no import cycle beyond the {len(read_allowed(allowed)[0])} listed")
    return status
