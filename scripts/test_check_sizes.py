"""Tests of scripts/check-sizes on small fixture trees.

Run: python3 -m unittest discover -s scripts -p 'test_*.py'
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import unittest
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader
from pathlib import Path

_loader = SourceFileLoader("check_sizes", str(Path(__file__).resolve().parent / "check-sizes"))
_spec = spec_from_loader("check_sizes", _loader)
assert _spec is not None
check_sizes = module_from_spec(_spec)
_loader.exec_module(check_sizes)


def run(files: dict[str, int]) -> tuple[int, str]:
    """check-sizes on a tree whose core holds `files` (path: line count)."""
    with tempfile.TemporaryDirectory() as d:
        for rel, n in files.items():
            f = Path(d) / "crates/toolgate/src" / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text("//\n" * n, encoding="utf-8")
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = check_sizes.main(["--root", d])
        return code, err.getvalue()


class CheckSizes(unittest.TestCase):
    def test_a_file_of_500_lines_passes(self) -> None:
        self.assertEqual(run({"a.rs": 500, "b/c.rs": 10}), (0, ""))

    def test_a_file_of_501_lines_fails_and_is_named(self) -> None:
        code, err = run({"a.rs": 10, "deep/b.rs": 501})
        self.assertEqual(code, 1)
        self.assertIn("crates/toolgate/src/deep/b.rs: 501 lines", err)
        self.assertNotIn("a.rs", err)

    def test_root_without_a_directory_is_a_usage_error(self) -> None:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(check_sizes.main(["--root"]), 2)
        self.assertIn("--root needs a directory", err.getvalue())


if __name__ == "__main__":
    unittest.main()
