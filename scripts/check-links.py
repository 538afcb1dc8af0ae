#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown documents.

Every link in README.md, CHANGELOG.md and docs/*.md that is not a URL (http:, https:, mailto:) must name a file or
directory that exists, and an anchor (`#section`, `other.md#section`) must name a heading of that Markdown file, slugged
the way GitHub does it (lowercase; punctuation other than `-` and `_` removed; spaces become `-`; a repeated slug gets
`-1`, `-2`, ...), or an explicit `<a id="...">` / `<a name="...">`. Links inside code blocks and inline code are not
links. Prints every broken link as `file:line: target: reason` and exits 1 when there is one.

Usage: scripts/check-links.py [ROOT] [FILE...]   (ROOT defaults to the repository; FILEs default to the documents above)
"""

import os
import re
import sys
import unicodedata

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def github_slug(text):
    """The anchor GitHub gives a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("`", "").strip().lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in "-_ " or category[0] in "LN" or category == "Mn":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def prose_lines(path):
    """The file's lines as (number, text) with code blocks left out and inline code blanked."""
    inside = None
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            fence = FENCE.match(line)
            if fence:
                if inside is None:
                    inside = fence.group(1)
                elif inside == fence.group(1):
                    inside = None
                continue
            if inside is None:
                raw = line.rstrip("\n")
                yield number, raw if HEADING.match(raw) else INLINE_CODE.sub("", raw)


_anchor_cache = {}


def anchors(path):
    if path not in _anchor_cache:
        found = set()
        seen = {}
        for _, line in prose_lines(path):
            heading = HEADING.match(line)
            if heading:
                slug = github_slug(heading.group(2))
                count = seen.get(slug, 0)
                seen[slug] = count + 1
                found.add(slug if count == 0 else f"{slug}-{count}")
            for explicit in EXPLICIT_ANCHOR.findall(line):
                found.add(explicit)
        _anchor_cache[path] = found
    return _anchor_cache[path]


def check(root, files):
    problems = []
    for relative in files:
        path = os.path.join(root, relative)
        for number, line in prose_lines(path):
            targets = [match.group(1) for match in LINK.finditer(line)]
            reference = REFERENCE.match(line)
            if reference:
                targets.append(reference.group(1))
            for target in targets:
                if SCHEME.match(target) or target.startswith("//"):
                    continue
                file_part, _, anchor = target.partition("#")
                if file_part:
                    resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                    if not os.path.realpath(resolved).startswith(os.path.realpath(root)):
                        problems.append(f"{relative}:{number}: {target}: points outside the repository")
                        continue
                    if not os.path.exists(resolved):
                        problems.append(f"{relative}:{number}: {target}: {file_part} does not exist")
                        continue
                else:
                    resolved = path
                if anchor:
                    if not resolved.endswith(".md") or os.path.isdir(resolved):
                        problems.append(f"{relative}:{number}: {target}: an anchor on a file that is not Markdown")
                    elif anchor not in anchors(resolved):
                        problems.append(
                            f"{relative}:{number}: {target}: no heading in {os.path.relpath(resolved, root)} "
                            f"has the anchor #{anchor}")
    return problems


def main(arguments):
    root = arguments[0] if arguments else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = arguments[1:]
    if not files:
        files = ["README.md", "CHANGELOG.md"] + sorted(
            os.path.join("docs", name) for name in os.listdir(os.path.join(root, "docs")) if name.endswith(".md"))
        files = [name for name in files if os.path.exists(os.path.join(root, name))]
    problems = check(root, files)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"check-links: {len(problems)} broken link(s) in {len(files)} file(s); fix the path or the anchor "
              "(anchors are GitHub heading slugs: lowercase, punctuation dropped, spaces as -)", file=sys.stderr)
        return 1
    print(f"check-links: {len(files)} file(s), every relative link and anchor resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
