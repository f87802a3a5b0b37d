"""The package's layout shows its layers (docs/architecture.md): which module may import
which, counting imports inside functions (type-only imports aside)."""

from __future__ import annotations

import ast
from pathlib import Path

import ferry


def _imports() -> dict[str, set[str]]:
    """Each Ferry module, and the Ferry modules it imports."""
    root = Path(ferry.__file__).parent
    modules = {
        ".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in root.rglob("*.py")
    }

    def owner(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
            for n in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
                targets = [n if n in modules else owner(node.module) for n in names]
            elif isinstance(node, ast.Import):
                targets = [owner(a.name) for a in node.names]
            else:
                continue
            graph[module] |= {t for t in targets if t.startswith("ferry") and t != module}
    return graph


def test_ferry_modules_import_no_cycle() -> None:
    """No Ferry module imports one that imports it back."""
    graph = _imports()
    assert "ferry.controller" in graph["ferry.supervisor"]  # (the graph was read)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            here = todo.pop()
            if here == goal:
                return True
            if here not in seen:
                seen.add(here)
                todo.extend(graph[here])
        return False

    cycles = sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if reaches(target, module)
    )
    assert cycles == []


# The layers below what runs and drives jobs: none of them imports the processes that
# follow jobs, the CLI, the API or the launcher; below the controller, none imports it.
_ABOVE_ALL = (
    "ferry.supervisor",
    "ferry.watcher",
    "ferry.followers",
    "ferry.cli",
    "ferry.api",
    "ferry.launcher",
)
_BELOW_THE_CONTROLLER = (
    "ferry.backends",
    "ferry.runner",
    "ferry.storage",
    "ferry.store",
    "ferry.contract",
    "ferry.runtime",
    "ferry.packaging",
    "ferry.telemetry",
    "ferry.catalog",
)


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_controller_and_what_it_uses_never_import_what_runs_it() -> None:
    graph = _imports()
    assert "ferry.backends.ray" in graph  # (the graph was read)
    wrong = sorted(
        (module, target)
        for module, targets in graph.items()
        if _within(module, ("ferry.controller", *_BELOW_THE_CONTROLLER))
        for target in targets
        if _within(target, _ABOVE_ALL)
        or (_within(module, _BELOW_THE_CONTROLLER) and _within(target, ("ferry.controller",)))
    )
    assert wrong == []
