"""The syntax trees of source files, parsed once a process: the layering checks walk every
module of ``runs/`` and ``harness/``, again in each of their many tests."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path


@cache
def tree(path: Path) -> ast.Module:
    """The syntax tree of a source file, read once (a test never changes a file it read)."""
    return ast.parse(path.read_text(), str(path))


@cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the file's tree, in ``ast.walk``'s order."""
    return tuple(ast.walk(tree(path)))
