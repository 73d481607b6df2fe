"""Tests of scripts/check-layers on small fixture trees.

Run: python3 -m unittest discover -s scripts -p 'test_*.py'
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from layers import check as check_layers  # noqa: E402  (after the path is set)


class Tree:
    """A throwaway repository: crates/<name>/{Cargo.toml,src/...} and an allowed file."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory()
        self.root = Path(self._dir.name)

    def close(self) -> None:
        self._dir.cleanup()

    def write(self, rel: str, text: str) -> None:
        f = self.root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")

    def crate(self, name: str, files: dict[str, str]) -> None:
        self.write(f"crates/{name}/Cargo.toml", f'[package]\nname = "{name}"\n')
        for rel, text in files.items():
            self.write(f"crates/{name}/src/{rel}", text)

    def check(self, allowed: str = "") -> tuple[int, str]:
        self.write("allowed.txt", allowed)
        status, messages = check_layers.check(self.root, self.root / "allowed.txt")
        return status, "\n".join(messages)

    def cycles(self) -> list[str]:
        found, errors = check_layers.find_cycles(self.root)
        assert not errors, errors
        return sorted(found)


class RustCycles(unittest.TestCase):
    def setUp(self) -> None:
        self.tree = Tree()

    def tearDown(self) -> None:
        self.tree.close()

    def test_a_one_way_chain_has_no_cycle(self) -> None:
        self.tree.crate(
            "core",
            {
                "lib.rs": "mod a;\nmod b;\nmod c;\npub use c::Top;\n",
                "a.rs": "pub struct A;\n",
                "b.rs": "use crate::a::A;\npub struct B(A);\n",
                "c.rs": "use crate::{a::A, b::B};\npub struct Top(A, B);\n",
            },
        )
        self.assertEqual(self.tree.check(), (0, ""))

    def test_two_modules_that_import_each_other_are_a_cycle_named_with_its_imports(self) -> None:
        self.tree.crate(
            "core",
            {
                "lib.rs": "mod a;\nmod b;\n",
                "a.rs": "use crate::b::B;\npub struct A;\n",
                "b.rs": "pub struct B;\n\nfn f() -> crate::a::A { crate::a::A }\n",
            },
        )
        status, out = self.tree.check()
        self.assertEqual(status, 1)
        self.assertIn("import cycle not in allowed.txt: core: a b", out)
        self.assertIn("a -> b  (crates/core/src/a.rs:1)", out)
        self.assertIn("b -> a  (crates/core/src/b.rs:3)", out)

    def test_a_name_imported_through_a_re_export_counts_for_the_module_that_defines_it(
        self,
    ) -> None:
        self.tree.crate(
            "core",
            {
                "lib.rs": "mod a;\nmod b;\npub use b::{B as Bee};\npub use a::*;\n",
                "a.rs": "use crate::Bee;\npub struct A;\n",
                "b.rs": "use crate::A;\npub struct B;\n",
            },
        )
        self.assertEqual(self.tree.cycles(), ["core: a b"])

    def test_siblings_inside_a_directory_module_are_compared_among_themselves(self) -> None:
        self.tree.crate(
            "core",
            {
                "lib.rs": "mod rate;\nmod engine;\n",
                "rate.rs": "mod bucket;\nmod sliding;\npub(crate) use bucket::Bucket;\n",
                "rate/bucket.rs": "use super::sliding::Window;\npub struct Bucket;\n",
                "rate/sliding.rs": "pub struct Window;\nfn f(_: super::bucket::Bucket) {}\n",
                "engine.rs": "use crate::rate::Bucket;\n",
            },
        )
        self.assertEqual(self.tree.cycles(), ["core: rate::bucket rate::sliding"])

    def test_a_module_naming_its_parent_or_its_child_is_not_a_cycle(self) -> None:
        self.tree.crate(
            "core",
            {
                "lib.rs": "mod quota;\n",
                "quota/mod.rs": "mod cell;\npub struct Quota;\nfn f(_: cell::Cell) {}\n",
                "quota/cell.rs": "use super::Quota;\npub struct Cell(Quota);\n",
            },
        )
        self.assertEqual(self.tree.check(), (0, ""))

    def test_comments_strings_and_test_only_code_are_not_imports(self) -> None:
        self.tree.crate(
            "core",
            {
                "lib.rs": "mod a;\nmod b;\n",
                "a.rs": "use crate::b::B;\npub struct A;\n",
                "b.rs": '''
                    // use crate::a::A;
                    /* crate::a::A /* nested */ crate::a::A */
                    pub struct B;
                    const S: &str = "crate::a::A";
                    const R: &str = r#"use crate::a::A;"#;
                    const Q: char = '"';
                    fn f<'a>(x: &'a str) -> &'a str { x }
                    #[cfg(test)]
                    mod tests {
                        use crate::a::A;
                    }
                    #[cfg(test)]
                    fn helper() -> crate::a::A { crate::a::A }
                ''',
            },
        )
        self.assertEqual(self.tree.check(), (0, ""))

    def test_a_string_does_not_hide_the_code_after_it(self) -> None:
        self.tree.crate(
            "core",
            {
                "lib.rs": "mod a;\nmod b;\n",
                "a.rs": "use crate::b::B;\npub struct A;\n",
                "b.rs": 'const Q: char = \'"\';\nuse crate::a::A;\nconst S: &str = "\\"";\n',
            },
        )
        self.assertEqual(self.tree.cycles(), ["core: a b"])


class AllowedList(unittest.TestCase):
    def setUp(self) -> None:
        self.tree = Tree()
        self.tree.crate(
            "core",
            {
                "lib.rs": "mod a;\nmod b;\nmod c;\n",
                "a.rs": "use crate::b::B;\npub struct A;\n",
                "b.rs": "use crate::a::A;\npub struct B;\n",
                "c.rs": "pub struct C;\n",
            },
        )

    def tearDown(self) -> None:
        self.tree.close()

    def test_a_listed_cycle_that_still_exists_passes(self) -> None:
        self.assertEqual(self.tree.check("# known\ncore: b a\n"), (0, ""))

    def test_a_listed_cycle_that_is_gone_fails_so_the_list_only_shrinks(self) -> None:
        self.tree.write("crates/core/src/b.rs", "pub struct B;\n")
        status, out = self.tree.check("core: a b\n")
        self.assertEqual(status, 1)
        self.assertIn("lists a cycle that no longer exists", out)
        self.assertIn("core: a b", out)

    def test_a_listed_cycle_that_grew_fails_as_a_new_cycle(self) -> None:
        self.tree.write("crates/core/src/b.rs", "use crate::c::C;\npub struct B;\n")
        self.tree.write("crates/core/src/c.rs", "use crate::a::A;\npub struct C;\n")
        status, out = self.tree.check("core: a b\n")
        self.assertEqual(status, 1)
        self.assertIn("import cycle not in allowed.txt: core: a b c", out)
        self.assertIn("no longer exists", out)

    def test_a_malformed_line_is_a_usage_error(self) -> None:
        status, out = self.tree.check("core a b\n")
        self.assertEqual(status, 2)
        self.assertIn("allowed.txt:1", out)


class PythonCycles(unittest.TestCase):
    def setUp(self) -> None:
        self.tree = Tree()
        self.tree.write("crates/py/Cargo.toml", '[package]\nname = "py"\n')

    def tearDown(self) -> None:
        self.tree.close()

    def pkg(self, files: dict[str, str]) -> None:
        for rel, text in files.items():
            self.tree.write(f"crates/py/python/pkg/{rel}", text)

    def test_an_import_at_the_bottom_of_a_file_closes_a_cycle(self) -> None:
        self.pkg(
            {
                "__init__.py": "from ._policy import Policy\n",
                "_policy.py": "class Policy: ...\n\nfrom .middleware import process\n",
                "middleware.py": "from ._policy import Policy\n\ndef process(): ...\n",
            }
        )
        status, out = self.tree.check()
        self.assertEqual(status, 1)
        self.assertIn("python pkg: _policy middleware", out)
        self.assertIn("_policy -> middleware  (crates/py/python/pkg/_policy.py:3)", out)

    def test_imports_inside_functions_and_through_the_package_count(self) -> None:
        self.pkg(
            {
                "__init__.py": "from .core import Engine\n",
                "core.py": "class Engine:\n    def f(self):\n        from pkg.adapter import g\n",
                "adapter.py": "from . import Engine\n\ndef g(): ...\n",
            }
        )
        self.assertEqual(self.tree.cycles(), ["python pkg: adapter core"])

    def test_a_package_importing_its_modules_and_a_one_way_chain_are_clean(self) -> None:
        self.pkg(
            {
                "__init__.py": "from ._errors import Rejected\nfrom .adapter import g\n",
                "_errors.py": "import json\n\nclass Rejected(Exception): ...\n",
                "_native.pyi": "class Engine: ...\n",
                "adapter.py": "from . import _native\nfrom ._errors import Rejected\n",
            }
        )
        self.assertEqual(self.tree.check(), (0, ""))


if __name__ == "__main__":
    unittest.main()
