"""Rust sources as check-layers sees them: comments and literals blanked, then the
module tree of a crate root with each module's children, items, `use` aliases and the
paths it writes (`use` trees, and inline `crate::`/`super::`/`self::` paths)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

Path_ = tuple[str, ...]

# --- Rust lexing ------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RAW_STR = re.compile(r'b?r(#*)"')


def strip_rust(src: str) -> str:
    """Blanks out comments, string and char literals, keeping newlines (line numbers)."""
    out: list[str] = []
    i, n = 0, len(src)

    def blank(text: str) -> str:
        return "".join("\n" if c == "\n" else " " for c in text)

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(src[i:j]))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(src[i:j]))
            i = j
        elif (c in "rb") and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")) and (
            m := _RAW_STR.match(src, i)
        ):
            end = '"' + m.group(1)
            j = src.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append(blank(src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(blank(src[i : j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a, 'static).
            if i + 1 < n and src[i + 1] == "\\":
                j = src.find("'", i + 2)
                j = n if j < 0 else j + 1
            elif i + 2 < n and src[i + 2] == "'":
                j = i + 3
            else:
                j = i + 1  # a lifetime: only the quote goes
            out.append(blank(src[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


@dataclass
class Tok:
    text: str
    line: int


_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|::|\S")


def tokenize(src: str) -> list[Tok]:
    toks: list[Tok] = []
    for lineno, line in enumerate(strip_rust(src).split("\n"), 1):
        toks.extend(Tok(m.group(0), lineno) for m in _TOKEN.finditer(line))
    return toks


# --- Rust module model --------------------------------------------------------------


@dataclass
class Ref:
    """A path written in module `origin` (a `use` path or an inline path)."""

    origin: Path_
    segments: list[str]
    file: Path
    line: int


@dataclass
class Module:
    path: Path_
    file: Path
    children: set[str] = field(default_factory=set)
    items: set[str] = field(default_factory=set)
    uses: dict[str, list[str]] = field(default_factory=dict)  # name -> path as written
    globs: list[list[str]] = field(default_factory=list)  # `use x::*` paths as written


_ITEM_KEYWORDS = {"struct", "enum", "union", "trait", "fn", "type", "const", "static"}


class RustCrate:
    """One crate root and every module reachable from it by `mod` declarations."""

    def __init__(self, label: str, root_file: Path):
        self.label = label
        self.modules: dict[Path_, Module] = {}
        self.refs: list[Ref] = []
        self.errors: list[str] = []
        self._load((), root_file, root_file.parent)

    # A module's own directory: where `mod x;` inside it looks for x.rs or x/mod.rs.
    def _load(self, path: Path_, file: Path, child_dir: Path) -> None:
        try:
            toks = tokenize(file.read_text(encoding="utf-8"))
        except OSError as e:
            self.errors.append(f"{self.label}: cannot read {file}: {e}")
            return
        self.modules[path] = Module(path, file)
        _Parser(self, toks, file).run(path, child_dir)


def _attr_is_test(attr: list[str]) -> bool:
    text = "".join(attr)
    return text == "cfg(test)" or text.startswith("cfg(all(test,")


class _Parser:
    """Walks one file's tokens: module declarations, items, `use` trees, paths."""

    def __init__(self, crate: RustCrate, toks: list[Tok], file: Path):
        self.crate, self.toks, self.file = crate, toks, file
        self.i = 0

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.toks[j].text if j < len(self.toks) else ""

    def run(self, path: Path_, child_dir: Path) -> None:
        self.body(path, child_dir, top=True)

    # Parses items until the closing brace of the current module (or the end of file).
    def body(self, path: Path_, child_dir: Path, top: bool) -> None:
        module = self.crate.modules[path]
        test_only = False
        file_attr: str | None = None
        depth = 0  # braces opened inside this module's items (fn bodies, impls, ...)
        while self.i < len(self.toks):
            t = self.peek()
            if t == "#":
                inner = self.peek(1) == "!"
                if self.peek(1 + inner) == "[":
                    self.i += 2 + inner
                    attr = self.group("[", "]")
                    if _attr_is_test(attr):
                        if inner and depth == 0:
                            return  # `#![cfg(test)]`: the whole module is test-only
                        test_only = True
                    if attr[:2] == ["path", "="]:
                        file_attr = "path"  # its string is blanked: not followed
                    continue
            if test_only and t not in ("pub", "(", "crate", "super", ")", "in"):
                self.skip_item()
                test_only, file_attr = False, None
                continue
            if t == "{":
                depth += 1
            elif t == "}":
                if depth == 0 and not top:
                    self.i += 1
                    return
                depth -= 1
            elif t == "mod" and _IDENT.fullmatch(self.peek(1)) and self.peek(2) in (";", "{"):
                self.module_decl(module, child_dir, file_attr)
                file_attr = None
                continue
            elif t == "use" and self.peek(1) != "<":  # not `impl Trait + use<'a>`
                self.use_item(module)
                continue
            elif t in _ITEM_KEYWORDS and _IDENT.fullmatch(self.peek(1)):
                if depth == 0:
                    module.items.add(self.peek(1))
            elif t == "macro_rules" and self.peek(1) == "!":
                if depth == 0:
                    module.items.add(self.peek(2))
            elif t in ("crate", "super", "self") and self.peek(1) == "::":
                if self.i == 0 or self.toks[self.i - 1].text != "::":
                    line = self.toks[self.i].line
                    self.crate.refs.append(Ref(path, self.path_segments(), self.file, line))
                    continue
            self.i += 1

    def group(self, open_: str, close: str) -> list[str]:
        """The tokens up to the bracket matching one already consumed."""
        depth, out = 1, []
        while self.i < len(self.toks):
            t = self.peek()
            self.i += 1
            if t == open_:
                depth += 1
            elif t == close:
                depth -= 1
                if depth == 0:
                    break
            out.append(t)
        return out

    def skip_item(self) -> None:
        """Skips one item: up to its `;` or the brace closing its first `{`."""
        while self.i < len(self.toks):
            t = self.peek()
            self.i += 1
            if t == ";":
                return
            if t == "{":
                self.group("{", "}")
                return

    def path_segments(self) -> list[str]:
        segs = [self.peek()]
        self.i += 1
        while self.peek() == "::" and _IDENT.fullmatch(self.peek(1)):
            segs.append(self.peek(1))
            self.i += 2
        return segs

    def module_decl(self, module: Module, child_dir: Path, file_attr: str | None) -> None:
        name = self.peek(1)
        inline = self.peek(2) == "{"
        self.i += 3
        module.children.add(name)
        path = module.path + (name,)
        if inline:
            self.crate.modules[path] = Module(path, self.file)
            self.body(path, child_dir / name, top=False)
            return
        if file_attr is not None:
            self.crate.errors.append(
                f"{self.crate.label}: `#[path]` on `mod {name};` in {self.file} is not followed"
            )
            return
        candidates = [child_dir / f"{name}.rs", child_dir / name / "mod.rs"]
        for f in candidates:
            if f.is_file():
                self.crate._load(path, f, child_dir / name if f.name != "mod.rs" else f.parent)
                return
        self.crate.errors.append(f"{self.crate.label}: no file for `mod {name};` in {self.file}")

    def use_item(self, module: Module) -> None:
        line = self.toks[self.i].line
        self.i += 1
        tree: list[str] = []
        while self.i < len(self.toks) and self.peek() != ";":
            tree.append(self.peek())
            self.i += 1
        self.i += 1
        for segs, alias in _expand_use(tree):
            if segs and segs[0] == "":
                continue  # `::extern_crate::...`
            if segs[-1] == "*":
                module.globs.append(segs[:-1])
                self.crate.refs.append(Ref(module.path, segs[:-1], self.file, line))
                continue
            if segs[-1] == "self":
                segs = segs[:-1]
            if alias not in (None, "_"):
                module.uses[alias] = segs
            elif alias is None and segs:
                module.uses[segs[-1]] = segs
            self.crate.refs.append(Ref(module.path, segs, self.file, line))


def _expand_use(tokens: list[str]) -> list[tuple[list[str], str | None]]:
    """Expands a use tree (`a::{b, c::{d as e, *}}`) into (path, alias) pairs."""
    pos = 0

    def tree(prefix: list[str]) -> list[tuple[list[str], str | None]]:
        nonlocal pos
        segs = list(prefix)
        if pos < len(tokens) and tokens[pos] == "::":
            segs.append("")  # a leading `::`
            pos += 1
        while pos < len(tokens):
            t = tokens[pos]
            if t == "{":
                pos += 1
                out: list[tuple[list[str], str | None]] = []
                while pos < len(tokens) and tokens[pos] != "}":
                    out.extend(tree(segs))
                    if pos < len(tokens) and tokens[pos] == ",":
                        pos += 1
                pos += 1
                return out
            if t in (",", "}"):
                return [(segs, None)] if segs != prefix else []
            if t == "as":
                alias = tokens[pos + 1] if pos + 1 < len(tokens) else None
                pos += 2
                return [(segs, alias)]
            if t != "::":
                segs.append(t)
            pos += 1
        return [(segs, None)] if segs != prefix else []

    # `pub(crate) use ...`: the visibility precedes `use` and is not part of the tree.
    return tree([])
