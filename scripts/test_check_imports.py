#!/usr/bin/env python3
"""Tests for check-imports.py: small crate trees written to a temporary folder, each checked as a
workspace of its own. Run: python3 -m unittest discover -s scripts -p 'test_*.py'"""
import contextlib
import importlib.util
import io
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "check-imports.py"
spec = importlib.util.spec_from_file_location("check_imports", SCRIPT)
check_imports = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_imports)


class Tree:
    """A workspace in a temporary folder: {path under crates/: source}."""

    def __init__(self, files):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = Path(self.tmp.name)
        for path, text in files.items():
            p = self.root / "crates" / path
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(textwrap.dedent(text).lstrip("\n"))

    def check(self, *args):
        """(exit code, output) of the check over this tree."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = check_imports.main(["--root", str(self.root), *args])
        return code, out.getvalue()

    def edges(self, crate="c"):
        """{(from, to)} as file names under the crate's src."""
        (c,) = list(check_imports.crates(self.root, {crate}))
        return {(c.show(a), c.show(b)) for a, b in c.edges()}

    def close(self):
        self.tmp.cleanup()


class CheckImports(unittest.TestCase):
    def tree(self, files):
        t = Tree(files)
        self.addCleanup(t.close)
        return t

    def test_circle_through_use_crate(self):
        """Two modules that `use crate::` each other: a circle, with both import sites."""
        t = self.tree({
            "c/src/lib.rs": "mod a;\nmod b;\n",
            "c/src/a.rs": """
                //! A.
                use crate::b::Thing;
                pub fn f() {}
            """,
            "c/src/b.rs": """
                //! B.

                pub struct Thing;
                fn g() { crate::a::f() }
            """,
        })
        code, out = t.check()
        self.assertEqual(code, 1)
        self.assertIn("c: circle of 2 modules: a.rs → b.rs → a.rs", out)
        self.assertIn("crates/c/src/a.rs:2 → b.rs (Thing)", out)
        self.assertIn("crates/c/src/b.rs:4 → a.rs (f)", out)

    def test_circle_through_super(self):
        """A parent that uses its child, and the child that reaches back with `super::`."""
        t = self.tree({
            "c/src/lib.rs": "pub mod h2;\n",
            "c/src/h2/mod.rs": """
                mod conn;
                pub use conn::Conn;
                pub struct Settings;
            """,
            "c/src/h2/conn.rs": """
                use super::Settings;
                pub struct Conn(Settings);
            """,
        })
        code, out = t.check()
        self.assertEqual(code, 1)
        self.assertIn("crates/c/src/h2/conn.rs:1 → h2/mod.rs (Settings)", out)
        self.assertIn("crates/c/src/h2/mod.rs:2 → h2/conn.rs (Conn)", out)

    def test_paths_in_comments_and_strings_do_not_count(self):
        """`crate::a` in comments, doc comments, doc links and literals is no import."""
        t = self.tree({
            "c/src/lib.rs": "mod a;\nmod b;\n",
            "c/src/a.rs": "use crate::b::B;\npub struct A;\n",
            "c/src/b.rs": r'''
                //! Used by [`crate::a::A`]; see crate::a.
                /// Like [`super::a::A`].
                pub struct B;
                // crate::a::A would be a circle
                /* crate::a::A /* nested */ crate::a::A */
                #[doc = "crate::a::A"]
                pub fn f() -> (&'static str, &'static [u8], char, char) {
                    let _ = r#"crate::a::A "quoted""#;
                    ("crate::a::A \" crate::a::A", b"crate::a::A", '"', '\'')
                }
                fn g<'a>(x: &'a str) -> &'a str { x } // crate::a::A
            ''',
        })
        self.assertEqual(t.edges(), {("a.rs", "b.rs")})
        code, out = t.check()
        self.assertEqual(code, 0, out)

    def test_clean_tree(self):
        """Imports that point one way: exit 0 and one line."""
        t = self.tree({
            "c/src/lib.rs": """
                //! Root.
                pub mod config;
                mod engine;
                pub use config::Config;
                pub use engine::run;
            """,
            "c/src/config.rs": "pub struct Config;\n",
            "c/src/engine.rs": """
                use crate::config::Config;
                pub fn run(_: &Config) {}
            """,
            "d/src/main.rs": "fn main() {}\n",
        })
        code, out = t.check()
        self.assertEqual(code, 0)
        self.assertEqual(out.count("\n"), 1)
        self.assertRegex(out, r"^check-imports: 2 crates, 4 modules, \d+ imports between them; "
                              r"no circles\n$")

    def test_declaring_a_child_is_no_import(self):
        """`mod x;` in a parent that a child reaches back to with `super::`."""
        t = self.tree({
            "c/src/lib.rs": "mod a;\npub const LIMIT: usize = 1;\n",
            "c/src/a.rs": "mod b;\nfn f() -> usize { super::LIMIT }\n",
            "c/src/a/b.rs": "fn g() -> usize { crate::LIMIT + super::super::LIMIT }\n",
        })
        self.assertEqual(t.edges(), {("a.rs", "lib.rs"), ("a/b.rs", "lib.rs")})

    def test_tests_at_the_bottom_reach_anywhere(self):
        """`#[cfg(test)]` modules, inline or in a file, are not part of the graph."""
        t = self.tree({
            "c/src/lib.rs": "mod a;\nmod b;\n",
            "c/src/a.rs": "use crate::b::B;\npub struct A;\n",
            "c/src/b.rs": """
                pub struct B;

                #[cfg(test)]
                mod tests {
                    use super::*;
                    use crate::a::A;
                    #[test]
                    fn t() { let _ = (A, B, crate::a::A); }
                }

                #[cfg(test)]
                #[allow(unused_imports)]
                mod more;
            """,
            "c/src/b/more.rs": "use crate::a::A;\n",
        })
        self.assertEqual(t.edges(), {("a.rs", "b.rs")})

    def test_paths_go_to_the_deepest_module_file(self):
        """`crate::h2::conn::X` is h2/conn.rs, `crate::h2::Y` h2/mod.rs, inline modules their
        file's, and a re-export is followed to where the name comes from."""
        t = self.tree({
            "c/src/lib.rs": """
                pub mod h2;
                mod report;
                mod engine;
                mod user;
                pub use report::Report;
            """,
            "c/src/h2/mod.rs": "pub mod conn;\npub struct Settings;\n",
            "c/src/h2/conn.rs": "pub struct Conn;\n",
            "c/src/report.rs": "pub struct Report;\n",
            "c/src/engine.rs": """
                pub mod inner {
                    pub fn f() {}
                }
                fn g() { self::inner::f(); }
            """,
            "c/src/user.rs": """
                use crate::h2::conn::Conn;
                use crate::engine;
                fn f(_: crate::h2::Settings, _: Conn) -> crate::Report {
                    engine::inner::f();
                    crate::Report
                }
            """,
        })
        self.assertEqual(t.edges(), {
            ("lib.rs", "report.rs"),
            ("user.rs", "h2/conn.rs"),
            ("user.rs", "h2/mod.rs"),
            ("user.rs", "engine.rs"),
            ("user.rs", "report.rs"),
        })

    def test_visibility_and_other_crates_are_no_imports(self):
        """`pub(in crate::a)`, `::std`, extern crates and local types are not edges."""
        t = self.tree({
            "c/src/lib.rs": "mod a;\nmod b;\n",
            "c/src/a.rs": "pub(crate) mod x {}\nuse crate::b::B;\n",
            "c/src/b.rs": """
                use std::io;
                use serde::Serialize;
                pub(in crate::a) struct B;
                pub(super) fn f() -> io::Result<()> { ::std::fs::read("x").map(|_| ()) }
                impl B { fn new() -> Self { Self } fn g() { let _ = Self::new(); } }
            """,
        })
        self.assertEqual(t.edges(), {("a.rs", "b.rs")})

    def test_crate_filter_and_warn_only(self):
        """`--crate` picks crates; `--warn-only` prints a crate's circles without failing."""
        circle = {
            "src/lib.rs": "mod a;\nmod b;\n",
            "src/a.rs": "use crate::b::B;\npub struct A;\n",
            "src/b.rs": "use crate::a::A;\npub struct B;\n",
        }
        files = {f"bad/{k}": v for k, v in circle.items()}
        files["good/src/lib.rs"] = "pub fn f() {}\n"
        t = self.tree(files)
        self.assertEqual(t.check("--crate", "good")[0], 0)
        self.assertEqual(t.check()[0], 1)
        code, out = t.check("--warn-only", "bad")
        self.assertEqual(code, 0)
        self.assertIn("bad: circle of 2 modules", out)
        self.assertIn("--warn-only", out)
        self.assertEqual(t.check("--crate", "nothing")[0], 2)

    def test_runs_as_a_script(self):
        """The file itself: exit status and output as CI sees them."""
        t = self.tree({"c/src/lib.rs": "mod a;\n", "c/src/a.rs": "use super::*;\n"})
        run = subprocess.run([sys.executable, str(SCRIPT), "--root", str(t.root)],
                             capture_output=True, text=True, check=False)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn("1 crate, 2 modules, 1 import between them; no circles", run.stdout)


if __name__ == "__main__":
    unittest.main()
