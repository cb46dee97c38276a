"""Every module imports on its own, and tokswap's module-level imports form no circle."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tokswap"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))


def module_level_imports(path: Path) -> set:
    """tokswap modules that `path` imports at module level (not inside functions)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                found.add(node.module.split(".")[0])
            elif node.level == 1:
                found.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("tokswap."):
                found.add(node.module.split(".")[1])
    return found & set(MODULES)


def test_module_level_imports_have_no_cycle():
    graph = {name: module_level_imports(PACKAGE / f"{name}.py") for name in MODULES}
    state = {}

    def visit(name, path):
        state[name] = "open"
        for dep in graph[name]:
            assert state.get(dep) != "open", "import cycle: " + " -> ".join(path + [dep])
            if dep not in state:
                visit(dep, path + [dep])
        state[name] = "done"

    for name in MODULES:
        if name not in state:
            visit(name, [name])


def test_cards_do_not_import_the_hub_client():
    graph = {name: module_level_imports(PACKAGE / f"{name}.py") for name in MODULES}
    assert "hub" not in graph["cards"]
    assert "from .hub import" not in (PACKAGE / "cards.py").read_text(encoding="utf-8")


@pytest.mark.slow  # a fresh interpreter per module
@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_alone(module):
    result = subprocess.run(
        [sys.executable, "-c", f"import tokswap.{module}"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
