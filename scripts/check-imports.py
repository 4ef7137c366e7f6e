#!/usr/bin/env python3
"""Fails on import circles between the modules of a crate.

For every crate of the workspace (`crates/*/src`) it builds the graph of the crate's modules, one
node per source file (`foo.rs`, `foo/mod.rs`), with an edge A → B when A's code names B:
`use crate::…`, `crate::…` paths in code, `super::…`, `self::…`, and paths through a child module
or through a name a `use` brought in. A path goes to the deepest module file that exists
(`crate::h2::conn::X` → h2/conn.rs, `crate::h2::H2Conn` → h2/mod.rs); a name that module only
re-exports (`pub use conn::H2Conn`) is followed to the module it comes from, so a crate root
that re-exports its API does not join every module into one circle.

Not imports: comments (doc comments and their links included), string and character literals,
`mod x;` declarations (a parent declaring a child), visibilities (`pub(in crate::x)`) and any
item marked `#[cfg(test)]` — the `mod tests { … }` at the bottom of a file, or a `mod tests;` in a
file of its own: test code may reach anywhere.

Every strongly connected component of more than one module is a circle: printed as a chain, with
the file:line of each import in it, and the check exits 1. Otherwise it prints one line and exits
0. `--warn-only CRATE` prints that crate's circles without failing on them.

The modules are found by following `mod` declarations from each crate root (`lib.rs`, `main.rs`,
`bin/*.rs`), as the compiler does; `#[path]` attributes are not followed. Standard library only.
"""
import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

# Where a comment, a string or a character literal may start. Raw and byte strings need no
# word character before their prefix (`br"…"`, not the end of an identifier `xbr`).
LITERAL_START = re.compile(
    r"""//|/\*|(?<![\w])[bc]?r(\#*)"|(?<![\w])[bc]"|"|(?<![\w])b'|'""")
STRING_REST = re.compile(r'(?:[^"\\]|\\.)*"', re.S)
CHAR_REST = re.compile(r"(?:[^'\\\n]|\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]{1,8}\}|.))'")
BLOCK_COMMENT = re.compile(r"/\*|\*/")
TOKEN = re.compile(r"\$?(?:r\#)?[A-Za-z_]\w*|::|\n|\S")
IDENT = re.compile(r"\$?(?:r\#)?[A-Za-z_]\w*")


def blank(text):
    """Stands in for a comment or literal: nothing but its line breaks."""
    return " " + "\n" * text.count("\n")


def strip(source):
    """The source without comments and without the contents of string and character literals;
    line breaks are kept, so lines still count."""
    out = []
    last = pos = 0
    n = len(source)
    while True:
        m = LITERAL_START.search(source, pos)
        if m is None:
            break
        start = m.start()
        tok = m.group(0)
        if tok == "//":
            end = source.find("\n", start)
            end = n if end < 0 else end
        elif tok == "/*":
            depth, end = 1, m.end()
            while depth:
                c = BLOCK_COMMENT.search(source, end)
                if c is None:
                    end = n
                    break
                depth += 1 if c.group(0) == "/*" else -1
                end = c.end()
        elif tok.endswith('"') and "r" in tok:
            close = '"' + m.group(1)
            end = source.find(close, m.end())
            end = n if end < 0 else end + len(close)
        elif tok.endswith('"'):
            s = STRING_REST.match(source, m.end())
            end = s.end() if s else n
        else:
            c = CHAR_REST.match(source, m.end())
            if c is None:  # a lifetime or a label: `'a`
                pos = m.end()
                continue
            end = c.end()
        out.append(source[last:start])
        out.append(blank(source[start:end]))
        last = pos = end
    out.append(source[last:])
    return "".join(out)


def tokenize(code):
    """(token, line) pairs, with sentinels at the end so that look-ahead never runs off."""
    toks, line = [], 1
    for m in TOKEN.finditer(code):
        t = m.group(0)
        if t == "\n":
            line += 1
        else:
            toks.append((t, line))
    toks.extend([("", line)] * 4)
    return toks


def is_ident(t):
    return bool(t) and IDENT.fullmatch(t) is not None


class Module:
    """One source file: what it declares and what it names, before resolution."""

    def __init__(self, path, modpath):
        self.path = path
        self.modpath = modpath
        # Child modules declared here, by the module path they are declared in (the file's own,
        # or an inline `mod x { … }` inside it): {scope: {name}}.
        self.children = defaultdict(set)
        self.files = []  # module paths of child files declared here
        self.bindings = {}  # name -> (segments, scope) of a `use` that brings it in
        self.refs = []  # (segments, scope, line, label)


def parse(path, modpath, text):
    mod = Module(path, modpath)
    toks = tokenize(strip(text))
    inline = []  # (name, brace depth inside it)
    depth = 0
    i = 0
    end = len(toks) - 4

    def scope():
        return modpath + tuple(name for name, _ in inline)

    def skip_item(j):
        """Past one item (or field, or statement): to a `;` or `,` at its level, or the end of its
        first `{ … }` block; never past the bracket that closes its container."""
        d = 0
        while j < end:
            t = toks[j][0]
            if t in "([{":
                d += 1
            elif t in ")]}":
                if d == 0:
                    return j
                d -= 1
                if d == 0 and t == "}":
                    return j + 1
            elif t in ";," and d == 0:
                return j + 1
            j += 1
        return j

    def close_of(j, open_, close):
        d = 0
        while j < end:
            t = toks[j][0]
            if t == open_:
                d += 1
            elif t == close:
                d -= 1
                if d == 0:
                    return j
            j += 1
        return j

    def use_tree(j, prefix, items):
        segs = list(prefix)
        while j < end:
            t, line = toks[j]
            if t == "{":
                j += 1
                while j < end and toks[j][0] != "}":
                    before = j
                    j = use_tree(j, segs, items)
                    if toks[j][0] == ",":
                        j += 1
                    elif j == before:
                        j += 1
                return j + 1
            if t == "*":
                items.append((segs, None, line, "*"))
                return j + 1
            if not is_ident(t):
                return j
            segs = segs + [t]
            j += 1
            if toks[j][0] == "::":
                j += 1
                continue
            name = t
            if t == "self":
                segs = segs[:-1]
                name = segs[-1] if segs else None
            if toks[j][0] == "as":
                name = toks[j + 1][0]
                name = None if name == "_" else name
                j += 2
            items.append((segs, name, line, t if t != "self" else name))
            return j
        return j

    pending_test = False
    while i < end:
        t, line = toks[i]
        if t == "#":
            j = i + 1 + (toks[i + 1][0] == "!")
            if toks[j][0] == "[":
                close = close_of(j, "[", "]")
                if [x for x, _ in toks[j + 1:close]] == ["cfg", "(", "test", ")"]:
                    pending_test = True
                i = close + 1
                continue
        if pending_test:
            pending_test = False
            j = i
            if toks[j][0] == "pub":
                j += 1
                if toks[j][0] == "(":
                    j = close_of(j, "(", ")") + 1
            if toks[j][0] == "mod" and toks[j + 2][0] == ";":
                mod.children[scope()].add(toks[j + 1][0])  # a test module's file: not followed
            i = skip_item(i)
            continue
        if t == "pub" and toks[i + 1][0] == "(":
            i = close_of(i + 1, "(", ")") + 1
            continue
        if t == "mod" and is_ident(toks[i + 1][0]):
            name, after = toks[i + 1][0], toks[i + 2][0]
            if after == ";":
                mod.children[scope()].add(name)
                mod.files.append(scope() + (name,))
                i += 3
                continue
            if after == "{":
                mod.children[scope()].add(name)
                inline.append((name, depth + 1))
                depth += 1
                i += 3
                continue
        if t == "use":
            j = i + 1
            if toks[j][0] == "::":  # `use ::name` is another crate's
                i = skip_item(j)
                continue
            items = []
            j = use_tree(j, [], items)
            here = scope()
            for segs, name, ln, label in items:
                if not segs:
                    continue
                mod.refs.append((tuple(segs), here, ln, label))
                if name and name != "*":
                    mod.bindings[name] = (tuple(segs), here)
            i = skip_item(j) if toks[j][0] != ";" else j + 1
            continue
        if t == "{":
            depth += 1
        elif t == "}":
            if inline and inline[-1][1] == depth:
                inline.pop()
            depth -= 1
        elif is_ident(t) and toks[i + 1][0] == "::" and (i == 0 or toks[i - 1][0] != "::"):
            segs = [t]
            j = i + 1
            while toks[j][0] == "::" and is_ident(toks[j + 1][0]):
                segs.append(toks[j + 1][0])
                j += 2
            if len(segs) > 1:
                mod.refs.append((tuple(segs), scope(), line, segs[-1]))
            i = j
            continue
        i += 1
    return mod


def module_file(root_dir, root_file, modpath):
    """The file of a module path, if there is one: `a::b` → a/b.rs or a/b/mod.rs."""
    if not modpath:
        return root_file
    base = root_dir.joinpath(*modpath[:-1])
    for candidate in (base / f"{modpath[-1]}.rs", base / modpath[-1] / "mod.rs"):
        if candidate.is_file():
            return candidate
    return None


class Crate:
    """One crate root and the modules reached from it."""

    def __init__(self, name, src, root_file):
        self.name = name
        self.src = src
        self.root_file = root_file
        self.modules = {}  # modpath -> Module
        todo = [()]
        while todo:
            modpath = todo.pop()
            if modpath in self.modules:
                continue
            path = module_file(root_file.parent, root_file, modpath)
            if path is None:
                continue
            m = parse(path, modpath, path.read_text(encoding="utf-8", errors="replace"))
            self.modules[modpath] = m
            todo.extend(m.files)

    def head(self, module, segs, scope, guard=0):
        """The absolute module path `segs` names from `scope` of `module`, or None when it is
        another crate's (or a local name that is not a path into this crate)."""
        h = segs[0]
        if h in ("crate", "$crate"):
            return segs[1:]
        if h == "self":
            return scope + segs[1:]
        if h == "super":
            n = 0
            while n < len(segs) and segs[n] == "super":
                n += 1
            if n > len(scope):
                return None
            return scope[:len(scope) - n] + segs[n:]
        if h in module.children.get(scope, ()):
            return scope + segs
        if h in module.bindings and guard < 8:
            bsegs, bscope = module.bindings[h]
            if bsegs[0] == h:  # `use name;` of another crate
                return None
            target = self.head(module, bsegs, bscope, guard + 1)
            return None if target is None else target + segs[1:]
        return None

    def locate(self, path, guard=0):
        """The module file a path ends in, following re-exports: (Module, rest of the path)."""
        path = tuple(s for s in path if s != "*")
        for k in range(len(path), -1, -1):
            m = self.modules.get(path[:k])
            if m is None:
                continue
            rest = path[k:]
            if rest and rest[0] in m.bindings and guard < 8:
                bsegs, bscope = m.bindings[rest[0]]
                target = self.head(m, bsegs, bscope)
                if target is not None and target != path:
                    return self.locate(target + rest[1:], guard + 1)
            return m, rest
        return None, path

    def edges(self):
        """{(from, to): [(line, label)]} between module files."""
        out = defaultdict(list)
        for m in self.modules.values():
            for segs, scope, line, label in m.refs:
                target = self.head(m, segs, scope)
                if target is None:
                    continue
                dest, rest = self.locate(target)
                if dest is None or dest is m:
                    continue
                out[(m.path, dest.path)].append((line, "::".join(rest) or label))
        return out

    def show(self, path):
        return path.relative_to(self.src).as_posix()


def components(nodes, edges):
    """Strongly connected components (Tarjan), each a sorted list."""
    succ = defaultdict(list)
    for a, b in edges:
        succ[a].append(b)
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(succ[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def shortest_cycle(start, members, edges):
    """The shortest chain of edges inside `members` from `start` back to it."""
    succ = defaultdict(list)
    for a, b in edges:
        if a in members and b in members:
            succ[a].append(b)
    prev = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(succ[v]):
                if w == start:
                    chain = [v]
                    while chain[-1] != start:
                        chain.append(prev[chain[-1]])
                    chain.reverse()
                    return chain + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


def describe(crate, root, comp, edges):
    """A circle as text: the chain that closes it, then every other import inside it."""
    members = set(comp)
    chain = shortest_cycle(comp[0], members, edges)
    lines = [f"check-imports: {crate.name}: circle of {len(comp)} modules: "
             + " → ".join(crate.show(p) for p in chain)
             + ("" if len(chain) - 1 == len(comp)
                else f" (and {', '.join(crate.show(p) for p in comp if p not in chain)})")]

    def site(a, b):
        uses = sorted(edges[(a, b)])
        first = uses[0][0]
        labels = list(dict.fromkeys(lbl for ln, lbl in uses if ln == first and lbl))
        more = sorted({ln for ln, _ in uses} - {first})
        text = f"  {a.relative_to(root).as_posix()}:{first} → {crate.show(b)}"
        if labels:
            text += f" ({', '.join(labels)})"
        if more:
            text += " also :" + ", :".join(map(str, more))
        return text

    in_chain = set(zip(chain, chain[1:]))
    lines += [site(a, b) for a, b in zip(chain, chain[1:])]
    rest = sorted(e for e in edges if e[0] in members and e[1] in members and e not in in_chain)
    if rest:
        lines.append("  and inside it:")
        lines += ["  " + site(a, b) for a, b in rest]
    return lines


def crates(root, wanted):
    """The crate roots of the workspace: `lib.rs`, `main.rs` and `bin/*` of each crates/*/src."""
    for src in sorted(root.glob("crates/*/src")):
        name = src.parent.name
        if wanted and name not in wanted:
            continue
        roots = [src / "lib.rs", src / "main.rs"]
        roots += sorted((src / "bin").glob("*.rs")) + sorted((src / "bin").glob("*/main.rs"))
        roots = [r for r in roots if r.is_file()]
        for r in roots:
            label = name if r == roots[0] else f"{name} ({r.relative_to(src).as_posix()})"
            yield Crate(label, src, r)


def plural(n, word):
    return f"{n} {word}{'s' * (n != 1)}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="the workspace (default: the one holding this script)")
    ap.add_argument("--crate", action="append", default=[], metavar="NAME",
                    help="check only this crate (its folder under crates/); repeatable")
    ap.add_argument("--graph", action="store_true",
                    help="also print every import between two modules, circle or not")
    ap.add_argument("--warn-only", action="append", default=[], metavar="NAME",
                    help="print this crate's circles without failing on them; repeatable")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    found = list(crates(root, set(args.crate)))
    if not found:
        print(f"check-imports: no crate under {root}/crates/*/src"
              + (f" named {', '.join(args.crate)}" if args.crate else ""), file=sys.stderr)
        return 2
    failing, warned, n_modules, n_edges = [], [], 0, 0
    for crate in found:
        edges = crate.edges()
        nodes = [m.path for m in crate.modules.values()]
        n_modules += len(nodes)
        n_edges += len(edges)
        circles = [c for c in components(nodes, edges) if len(c) > 1]
        if args.graph:
            for (a, b), uses in sorted(edges.items()):
                first = min(uses)
                print(f"{a.relative_to(root).as_posix()}:{first[0]} → {crate.show(b)} ({first[1]})")
        for comp in circles:
            for line in describe(crate, root, comp, edges):
                print(line)
        if circles:
            base = crate.name.split(" ")[0]
            (warned if base in args.warn_only else failing).append((crate.name, len(circles)))
    summary = (f"{plural(len(found), 'crate')}, {plural(n_modules, 'module')}, "
               f"{plural(n_edges, 'import')} between them")
    count = ", ".join(f"{name}: {n}" for name, n in failing + warned)
    if failing:
        print(f"check-imports: {summary}; circles in {count}")
        return 1
    if warned:
        print(f"check-imports: {summary}; circles only where --warn-only allows them ({count})")
        return 0
    print(f"check-imports: {summary}; no circles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
