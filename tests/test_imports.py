"""The house's shape: every module imports on its own, no import circle, and no module imports one above it.

Imports inside functions count too: a lazy import is still a dependency, only a cheaper one.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tokswap"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(module_name(p) for p in PACKAGE.rglob("*.py") if p.stem != "__main__")

# Floors, from the ground up. A module may import from its own floor or any floor below, never above.
# `tokswap` itself (lazy exports) and `tokswap.testing` (the loopback Hub, off the product's path) stand aside.
FLOORS = [
    ["tokswap.errors", "tokswap.constants", "tokswap.telemetry", "tokswap.utils"],
    ["tokswap.offline"],
    # the Hub client knows repos and files, not an alignment's insides, so TokenAlignment can use it
    ["tokswap.alignment", "tokswap.hub"],
    [
        "tokswap.align.vocab",
        "tokswap.align.cooccurrence",
        "tokswap.align.glove",
        "tokswap.align.matching",
        "tokswap.align.byte_offsets",
        "tokswap.align.leading_pieces",
        "tokswap.align.quality",
        "tokswap.carved_rows",
    ],
    [
        "tokswap.align",
        "tokswap.loading",
        "tokswap.modeling",
        "tokswap.hub.prebuilt",
        "tokswap.default_corpus",
        "tokswap.vocab_extension",
        "tokswap.carved_windows",
    ],
    ["tokswap.init_methods", "tokswap.surgery", "tokswap.evaluation", "tokswap.body_merge"],
    ["tokswap.new_word_fit", "tokswap.output_row_fit", "tokswap.carved_usage"],
    ["tokswap.leading_piece_outputs"],
    ["tokswap.trainer_utils", "tokswap.group_split", "tokswap.carved_rehearsal"],
    [
        "tokswap.self_distillation",
        "tokswap.distillation",
        "tokswap.training",
        "tokswap.drafting",
    ],
    ["tokswap.swapper"],
    ["tokswap.cli"],
]


def floor_of(module: str) -> int:
    """The floor of the longest listed prefix of `module` (`tokswap.align.pipeline` -> `tokswap.align`)."""
    best, floor = "", None
    for level, names in enumerate(FLOORS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, floor = name, level
    return floor


def imports_of(path: Path, module_level_only: bool = False) -> set:
    """The tokswap modules `path` imports (absolute names; `from tokswap.x import y` counts y when it is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if module_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == "tokswap"
            and not node.level
        ):
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "tokswap")
    return found


def test_imports_are_absolute():
    relative = [
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        if any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(ast.parse(p.read_text())))
    ]
    assert not relative, f"relative imports in {relative}: write `from tokswap.x import y` so floors are checkable"


def test_every_module_has_a_floor():
    homeless = [m for m in MODULES if m != "tokswap" and not m.startswith("tokswap.testing") and floor_of(m) is None]
    assert not homeless, f"add these modules to FLOORS: {homeless}"


def test_no_module_imports_from_a_floor_above_it():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        module = module_name(path)
        if module == "tokswap" or module.startswith("tokswap.testing") or path.stem == "__main__":
            continue
        for dep in imports_of(path):
            if dep == "tokswap" or dep.startswith("tokswap.testing"):
                if dep == "tokswap":
                    upward.append(f"{module} -> tokswap (import from the defining module instead)")
                continue
            if floor_of(dep) is not None and floor_of(dep) > floor_of(module):
                upward.append(f"{module} (floor {floor_of(module)}) -> {dep} (floor {floor_of(dep)})")
    assert not upward, "imports going up:\n" + "\n".join(sorted(upward))


def test_imports_have_no_cycle():
    graph = {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py") if p.stem != "__main__"}
    state = {}

    def visit(name, trail):
        state[name] = "open"
        for dep in sorted(graph.get(name, ())):
            assert state.get(dep) != "open", "import cycle: " + " -> ".join(trail + [dep])
            if dep not in state:
                visit(dep, trail + [dep])
        state[name] = "done"

    for name in sorted(graph):
        if name != "tokswap" and name not in state:
            visit(name, [name])


def test_cards_do_not_import_the_hub_client():
    assert not any(dep in ("tokswap.hub", "tokswap.hub.push") for dep in imports_of(PACKAGE / "hub" / "cards.py"))


def test_no_import_error_fallbacks_around_tokswap_modules():
    """`except ImportError` is for optional third-party packages, never tokswap's own modules."""
    guarded = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers
            ):
                body = ast.Module(body=node.body, type_ignores=[])
                if any(
                    isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith("tokswap"))
                    for n in ast.walk(body)
                ):
                    guarded.append(f"{module_name(path)}:{node.lineno}")
    assert not guarded, f"ImportError caught around tokswap's own imports: {guarded}"


@pytest.mark.slow  # a fresh interpreter per module
@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_alone(module):
    result = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_no_function_body_over_60_lines():
    """Long work is split into named steps: no function body in src/ over 60 lines, its docstring not counted."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                has_docstring = isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant
                )
                if has_docstring and len(body) == 1:
                    continue
                first = body[1] if has_docstring else body[0]
                length = node.end_lineno - first.lineno + 1
                if length > 60:
                    long.append(f"{module_name(path)}.{node.name}: {length} lines")
    assert not long, "split these into named steps:\n" + "\n".join(long)
