#!/usr/bin/env python3
"""Prints the apt sources line for a Debian release's backports suite, built from the machine's
own apt sources: the archive that serves the release's main component (its URI and, when it has
one, its Signed-By keyring), with the suite CODENAME-backports. So the install steps name no
archive host of their own and work wherever apt is configured (a mirror, a proxy, a snapshot).

Both source formats are read: one-line entries in /etc/apt/sources.list and *.list files, and
deb822 stanzas in *.sources files. Disabled entries (`#` lines, `Enabled: no`) and deb-src are
skipped. Exit 1, with a line on stderr, when no source serves CODENAME main.

Usage: apt-backports.py CODENAME [SOURCES_DIR_ROOT]   (e.g. `apt-backports.py bookworm`; the
second argument, / by default, is where etc/apt lives, for tests)."""
import sys
from pathlib import Path


def one_line_entries(text):
    """(uri, suite, components, options) of each `deb` line of a sources.list file."""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        words = line.split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        options = {}
        if words and words[0].startswith("["):
            # `[arch=amd64 signed-by=/usr/share/keyrings/x.gpg]`, possibly spread over words.
            opts = []
            while words:
                word = words.pop(0)
                opts.append(word)
                if word.endswith("]"):
                    break
            for opt in " ".join(opts).strip("[]").split():
                key, _, value = opt.partition("=")
                options[key.lower()] = value
        if len(words) < 2:
            continue
        yield words[0], words[1], words[2:], options


def deb822_entries(text):
    """(uri, suite, components, options) for each URI and suite of each enabled `deb` stanza."""
    for stanza in deb822_stanzas(text):
        if "deb" not in stanza.get("types", "").split():
            continue
        if stanza.get("enabled", "yes").lower() == "no":
            continue
        options = {}
        if "signed-by" in stanza and stanza["signed-by"].startswith("/"):
            # A path (an inline key block cannot go on a one-line entry).
            options["signed-by"] = stanza["signed-by"].split()[0]
        components = stanza.get("components", "").split()
        for uri in stanza.get("uris", "").split():
            for suite in stanza.get("suites", "").split():
                yield uri, suite, components, options


def deb822_stanzas(text):
    """Each stanza of a deb822 file as {lower-case field: value}; continuation lines joined."""
    stanza, field = {}, None
    for raw in text.splitlines() + [""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if stanza:
                yield stanza
            stanza, field = {}, None
            continue
        if raw[0] in " \t" and field:
            stanza[field] += " " + raw.strip()
            continue
        key, sep, value = raw.partition(":")
        if sep:
            field = key.strip().lower()
            stanza[field] = value.strip()


def entries(root):
    """Every enabled binary entry of the apt sources under ROOT/etc/apt."""
    apt = Path(root) / "etc" / "apt"
    files = [apt / "sources.list"]
    files += sorted((apt / "sources.list.d").glob("*"))
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.name.endswith(".sources"):
            yield from deb822_entries(text)
        elif path.name == "sources.list" or path.name.endswith(".list"):
            yield from one_line_entries(text)


def backports_line(codename, root="/"):
    """The one-line entry for CODENAME-backports main from the archive serving CODENAME main,
    or None when no source does."""
    for uri, suite, components, options in entries(root):
        if suite == codename and "main" in components:
            opts = f"[signed-by={options['signed-by']}] " if "signed-by" in options else ""
            return f"deb {opts}{uri} {codename}-backports main"
    return None


def main(argv):
    if len(argv) not in (1, 2):
        print("usage: apt-backports.py CODENAME [ROOT]", file=sys.stderr)
        return 2
    line = backports_line(argv[0], argv[1] if len(argv) == 2 else "/")
    if line is None:
        print(f"apt-backports.py: no apt source serves {argv[0]} main", file=sys.stderr)
        return 1
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
