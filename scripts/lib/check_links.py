#!/usr/bin/env python3
"""The repository is self-contained: every relative Markdown link resolves
(file and #anchor), every `docs/<name>.md` and every bare `<name>.md` mentioned in
any tracked file names a file of this repository, and nothing points into a
directory outside it (a `..` path that leaves the repository).

Usage: check_links.py [ROOT]   (default: the git top level)
       check_links.py --self-test
Exit status 1 lists every problem as FILE:LINE: message.
"""

import os
import re
import subprocess
import sys
import tempfile

LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOCS_NAME = re.compile(r"(?<![\w./-])((?:\.\./)*docs/[\w.-]+\.md)\b")
BARE_NAME = re.compile(r"(?<![\w./-])([A-Z][A-Z0-9_-]*\.md)\b")
OUTSIDE = re.compile(r"\.\./shared/")
TEXT_EXT = {
    ".md", ".rs", ".h", ".c", ".py", ".pyi", ".js", ".mjs", ".ts", ".sh",
    ".toml", ".json", ".sql", ".lua", ".txt", ".in", ".yml", ".yaml", "",
}


def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, fenced = set(), False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("```"):
                    fenced = not fenced
                elif not fenced and line.startswith("#"):
                    found.add(slug(line.lstrip("#")))
        cache[path] = found
    return cache[path]


def tracked(root):
    out = subprocess.run(
        ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True,
    ).stdout.decode()
    return [p for p in out.split("\0") if p and os.path.isfile(os.path.join(root, p))]


def check(root):
    problems = []
    me = os.path.relpath(os.path.abspath(__file__), root)
    for rel in tracked(root):
        if os.path.splitext(rel)[1] not in TEXT_EXT or rel == me:
            continue
        path = os.path.join(root, rel)
        here = os.path.dirname(path)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except (UnicodeDecodeError, OSError):
            continue
        fenced = False
        for n, line in enumerate(lines, 1):
            where = f"{rel}:{n}"
            if OUTSIDE.search(line):
                problems.append(f"{where}: points outside the repository: {line.strip()}")
            if rel.endswith(".md"):
                if line.lstrip().startswith("```"):
                    fenced = not fenced
                if not fenced:
                    for target in LINK.findall(line):
                        problems += link_problems(root, here, where, target)
            for name in DOCS_NAME.findall(line):
                candidates = [os.path.join(here, name), os.path.join(root, name.lstrip("./"))]
                if not any(os.path.isfile(c) for c in candidates):
                    problems.append(f"{where}: {name} does not exist")
            for name in BARE_NAME.findall(line):
                candidates = [os.path.join(d, name) for d in (here, root, os.path.join(root, "docs"))]
                if not any(os.path.isfile(c) for c in candidates):
                    problems.append(f"{where}: {name} is neither beside this file, at the root nor in docs/")
    return problems


def link_problems(root, here, where, target):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return []  # a URL (https:, mailto:, ...), not a file of the repository
    file_part, _, anchor = target.partition("#")
    dest = os.path.normpath(os.path.join(here, file_part)) if file_part else os.path.join(
        root, where.rsplit(":", 1)[0])
    if not os.path.abspath(dest).startswith(os.path.abspath(root) + os.sep):
        return [f"{where}: link {target} leaves the repository"]
    if not os.path.exists(dest):
        return [f"{where}: link {target} does not resolve"]
    if anchor and dest.endswith(".md") and anchor not in anchors(dest):
        return [f"{where}: link {target}: no heading with anchor #{anchor}"]
    return []


def self_test():
    """The check finds each kind of problem and accepts a clean tree."""
    # Names built at run time, so no search of this file finds them.
    MD = ".md"
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(root, rel)) or root, exist_ok=True)
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)
        subprocess.run(["git", "init", "-q", root], check=True)
        write("docs/GOOD" + MD, "# Good\n## 2. The rule\n")
        write("README.md", "[ok](docs/GOOD" + MD + "#2-the-rule) [web](https://example.org)\n")
        write("src/a.rs", "// see docs/GOOD" + MD + " section 2 and GOOD" + MD + "\n")
        assert check(root) == [], check(root)
        write("README.md", "[bad](docs/MISSING" + MD + ") [anchor](docs/GOOD" + MD + "#nope)\n")
        write("src/a.rs", "// see docs/GONE" + MD + ", DESIGN.md and .." + "/shared/X\n")
        found = "\n".join(check(root))
        for needle in ["docs/MISSING" + MD + " does not resolve", "#nope", "docs/GONE" + MD + " does not exist",
                       "DESIGN.md is neither", "outside the repository"]:
            assert needle in found, (needle, found)
    print("check_links self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True, text=True
    ).stdout.strip()
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken link(s) or outside reference(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
