#!/usr/bin/env python3
"""The shape rules of docs/layout.md, checked in CI (tests/run.sh):

- imports point one way: no two files of `src/` (or `protocol/src/`) reach
  each other through `crate::`/`super::`/`self::` paths, however long the
  circle; and no parent-child tie (a module file using a child that uses
  what the module file itself defines: that belongs in a leaf file);
- no file over 600 lines;
- no function outside `#[cfg(test)]` code over 100 lines, counted from its
  `fn` line to its closing brace.

Usage: tests/layout.py [ROOT...]   (default: src protocol/src). Prints each
breach and exits 1 if there is one.
"""
import os
import re
import sys

MAX_FILE_LINES = 600
MAX_FN_LINES = 100


def rust_files(root):
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".rs"):
                yield os.path.join(folder, name)


def module_of(root, path):
    """`src/engine/mod.rs` -> ('engine',); `src/lib.rs` -> ()."""
    parts = os.path.relpath(path, root)[: -len(".rs")].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def is_test_file(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    return rel[-1] in ("tests.rs",) or rel[-1].endswith("_tests.rs") or "tests" in rel[:-1]


def without_comments_and_strings(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def named_paths(text, children):
    """Every module path the code names: `crate::a::b`, `super::x`, items of
    grouped imports (`use super::{a, b::C}`), and a module file's bare
    `child::item` paths."""
    paths = re.findall(r"\b(?:crate|super|self)(?:::\w+)+", text)
    heads = ["crate", "super", "self"] + ["(?<![\\w:])" + child for child in sorted(children)]
    grouped = r"((?:%s)(?:::\w+)*)::\{([^{}]*)\}" % "|".join(heads)
    for head, group in re.findall(grouped, text):
        if head.split("::")[0] in children:
            head = "self::" + head
        for item in group.split(","):
            item = item.strip().split(" ")[0]
            if item and item != "self":
                paths.append(head + "::" + item)
    if children:
        alternatives = "|".join(sorted(children))
        for path in re.findall(r"(?<![\w:])((?:%s)(?:::\w+)+)" % alternatives, text):
            paths.append("self::" + path)
    return paths


def target(me, path):
    segments = path.split("::")
    if segments[0] == "crate":
        return segments[1:]
    if segments[0] == "self":
        return list(me) + segments[1:]
    base = list(me)
    while segments and segments[0] == "super":
        segments.pop(0)
        base.pop()
    return base + segments


def import_graph(root):
    modules = {module_of(root, p): p for p in rust_files(root) if not is_test_file(root, p)}
    edges = {m: set() for m in modules}
    upward = set()
    for me, path in modules.items():
        text = without_comments_and_strings(open(path, encoding="utf-8").read())
        children = set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text, re.M))
        for named in named_paths(text, children):
            parts = target(me, named)
            while parts and tuple(parts) not in modules:
                parts.pop()
            found = tuple(parts)
            if found == me or (not parts and () not in modules):
                continue
            if len(found) < len(me) and me[: len(found)] == found:
                upward.add((me, found))
            else:
                edges[me].add(found)
    return modules, edges, upward


def circles(edges):
    """Strongly connected groups of two or more files (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    sys.setrecursionlimit(20000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return groups


def long_functions(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    end = len(lines)
    for i, line in enumerate(lines[:-1]):
        if line.startswith("#[cfg(test)]") and re.match(r"mod \w+ \{", lines[i + 1]):
            end = i
            break
    fn = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")
    for i, line in enumerate(lines[:end]):
        m = fn.match(line)
        if not m or line.rstrip().endswith(";"):
            continue
        indent, close = m.group(1), m.group(1) + "}"
        j = i
        while j < end and lines[j].rstrip() != close:
            j += 1
        if j - i + 1 > MAX_FN_LINES:
            yield m.group(2), i + 1, j - i + 1


def main(roots):
    breaches = []
    for root in roots:
        modules, edges, upward = import_graph(root)
        for group in circles(edges):
            breaches.append("import circle: " + " ".join(sorted(modules[m] for m in group)))
        for child, parent in sorted(upward):
            if child in edges[parent]:
                breaches.append("parent-child tie: %s <-> %s" % (modules[parent], modules[child]))
        for path in rust_files(root):
            count = open(path, encoding="utf-8").read().count("\n")
            if count > MAX_FILE_LINES:
                breaches.append("%s: %d lines (at most %d)" % (path, count, MAX_FILE_LINES))
            if is_test_file(root, path):
                continue
            for name, line, length in long_functions(path):
                breaches.append("%s:%d: fn %s is %d lines (at most %d)" % (path, line, name, length, MAX_FN_LINES))
    for breach in breaches:
        print(breach)
    print("layout: %d breach(es)" % len(breaches))
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["src", "protocol/src"]))
