"""The shape of the package: modules a reader can hold in mind, and imports that flow one way.

Every import counts, those inside functions included (a function-level import only hides a
circle, it does not remove it); imports under ``if TYPE_CHECKING:`` do not run and are left
out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "snapshotd"
MAX_LINES = 500

# The parts of the package, from the top down (docs/ARCHITECTURE.md): a module may import
# its own part and the parts below it, never one above; parts on one line are siblings that
# import neither each other nor anything above them. A part is a folder of the package, or a
# sub-folder named here ("crawlers.verification"), which then is a part of its own.
LAYERS = (
    ("__main__", "middleware"),
    ("cli",),
    ("recipes",),
    ("server",),
    ("api",),
    ("services",),
    ("proxy", "crawl"),
    ("capture",),
    ("search",),
    ("sites",),
    ("render", "rewrite", "crawlers.verification"),
    ("observe",),
    ("store",),
    ("net",),
    ("config",),
    ("crawlers",),
    ("pages", "http_text", "patterns"),
)
NAMED = {part for layer in LAYERS for part in layer}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports when it runs."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def add(target: str) -> None:
        # ``from snapshotd.a import b`` may name the module a.b or a name in a.
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = name.split(".")
                    base = base if is_package else base[:-1]
                    base = base[: len(base) - (child.level - 1)]
                    module = ".".join(base + ([child.module] if child.module else []))
                else:
                    module = child.module or ""
                for alias in child.names:
                    add(f"{module}.{alias.name}")
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (strongly connected components of more than one)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_module_is_longer_than_a_reader_holds_in_mind() -> None:
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def _part(module: str) -> str:
    names = module.split(".")[1:]
    if len(names) > 1 and ".".join(names[:2]) in NAMED:
        return ".".join(names[:2])
    return names[0] if names else ""


def _layer(part: str) -> int:
    return next(i for i, parts in enumerate(LAYERS) if part in parts)


def _against_the_layers(graph: dict[str, set[str]]) -> list[str]:
    """Each import that goes up the layers or sideways to a sibling part, as "a -> b"."""
    return sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        for target in targets
        if _part(name) and _part(target) and _part(name) != _part(target)
        and _layer(_part(target)) <= _layer(_part(name))
    )


def _repeated_file_names(paths: list[Path]) -> set[str]:
    names = [path.name for path in paths if path.name != "__init__.py"]
    return {name for name in names if names.count(name) > 1}


def test_no_file_name_is_used_by_two_folders() -> None:
    assert _repeated_file_names(list(PACKAGE.rglob("*.py"))) == set()


def test_the_repeat_check_finds_a_repeated_name() -> None:
    paths = [Path("a/base.py"), Path("b/base.py"), Path("a/__init__.py"), Path("b/__init__.py")]
    assert _repeated_file_names(paths) == {"base.py"}


def test_every_module_belongs_to_one_part_of_the_layers() -> None:
    parts = {_part(name) for name in _modules()} - {""}
    assert parts - NAMED == set()


def test_imports_flow_down_the_layers() -> None:
    assert _against_the_layers(_graph()) == []


def test_the_layer_check_finds_an_import_up_or_sideways() -> None:
    graph = {
        "snapshotd.http_text.urls": {"snapshotd.config.settings"},
        "snapshotd.proxy.handler": {"snapshotd.crawl.engine", "snapshotd.http_text.urls"},
        "snapshotd.cli.serve": {"snapshotd.server.run"},
        # a sub-folder named in LAYERS is a part of its own, above or below its folder
        "snapshotd.crawlers.bots": {"snapshotd.crawlers.verification.claims"},
        "snapshotd.crawlers.verification.claims": {"snapshotd.crawlers.families"},
    }
    assert _against_the_layers(graph) == [
        "snapshotd.crawlers.bots -> snapshotd.crawlers.verification.claims",
        "snapshotd.http_text.urls -> snapshotd.config.settings",
        "snapshotd.proxy.handler -> snapshotd.crawl.engine",
    ]


def test_no_import_circle_not_even_through_function_level_imports() -> None:
    assert _cycles(_graph()) == []


def test_the_circle_finder_finds_circles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_function_level_imports_count(tmp_path) -> None:
    (tmp_path / "m.py").write_text("def f():\n    from snapshotd.server import app\n")
    (tmp_path / "t.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from snapshotd.server import app\n"
    )
    modules = {"snapshotd.server.app": tmp_path / "app.py"}
    assert _imports("snapshotd.m", tmp_path / "m.py", modules) == {"snapshotd.server.app"}
    assert _imports("snapshotd.t", tmp_path / "t.py", modules) == set()


# The questions of a site's path policy, each answered by one function of
# snapshotd/sites/path_policy.py and by no other function of that name in the parts that ask
# them (a render slot's ``full`` is another matter).
PATH_POLICY = {
    "path_of", "crawls", "processes", "processes_html", "is_ignored", "full",
    "limits_processing", "at_max_pages",
}
ASKING = ("config", "sites", "crawl", "capture", "proxy", "api", "services")


def test_a_site_s_path_policy_is_answered_in_one_place():
    home = PACKAGE / "sites" / "path_policy.py"
    defined: dict[str, list[str]] = {}
    paths = [p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] in ASKING
             or p.relative_to(PACKAGE).with_suffix("").parts[0] in ASKING]
    for path in sorted(paths):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                node.name in PATH_POLICY
            ):
                defined.setdefault(node.name, []).append(str(path.relative_to(PACKAGE)))
    assert defined == {name: [str(home.relative_to(PACKAGE))] for name in PATH_POLICY}


# The settings those questions are answered from: outside sites/path_policy.py, the parts
# that ask them read them only to show or store them, never to judge by them.
POLICY_VALUES = {
    "max_pages", "max_to_process", "ignore", "url_crawl_pattern", "url_crawl_regex",
    "url_process_pattern", "url_process_regex", "page_process_pattern", "url_regexes",
}


def _judged_by_policy_values(tree: ast.Module) -> list[str]:
    """Each comparison of ``tree`` that reads one of :data:`POLICY_VALUES` of a site, and
    each condition that is one of them, as ``line: source``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            reads = [a for part in (node.left, *node.comparators) for a in ast.walk(part)]
        elif isinstance(node, (ast.If, ast.IfExp, ast.While)):
            reads = [node.test]
        elif isinstance(node, ast.BoolOp):
            reads = list(node.values)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            reads = [node.operand]
        else:
            continue
        if any(
            isinstance(a, ast.Attribute) and a.attr in POLICY_VALUES
            and isinstance(a.value, ast.Name) and a.value.id != "args"
            for a in reads
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(found)


def test_only_the_path_policy_judges_by_its_settings():
    home = PACKAGE / "sites" / "path_policy.py"
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        part = path.relative_to(PACKAGE).with_suffix("").parts[0]
        if part in ASKING and path != home:
            if judged := _judged_by_policy_values(ast.parse(path.read_text(), str(path))):
                found[str(path.relative_to(PACKAGE))] = judged
    assert found == {}


def test_the_policy_check_finds_a_site_judged_by_its_limits():
    tree = ast.parse(
        "def f(site, n):\n    if site.max_to_process < 0:\n        return n >= site.max_pages\n"
        "    return not site.ignore or site.page_process_pattern\n"
    )
    assert _judged_by_policy_values(tree) == [
        "2: site.max_to_process < 0",
        "3: n >= site.max_pages",
        "4: not site.ignore",
        "4: not site.ignore or site.page_process_pattern",
    ]


def _patched_and_reached(tree: ast.Module) -> list[str]:
    """What a module does to the pieces it made after making them: each attribute of one it
    sets (``capture.learner.on_change = ...``) and each reach past a piece's own parts
    (``self.proxy.claims.verifier.start``), as ``line: source``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute):
                    found.append(f"{node.lineno}: {ast.unparse(target)} =")
        if isinstance(node, ast.Attribute):
            depth, inner = 0, node
            while isinstance(inner, ast.Attribute):
                depth, inner = depth + 1, inner.value
            if depth > 3 and isinstance(inner, ast.Name):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    # An attribute chain is found at each of its lengths past the bound: the longest says it.
    return sorted({f for f in found if not any(g != f and g.startswith(f) for g in found)})


def test_services_give_each_piece_what_it_uses_when_it_is_made():
    services = PACKAGE / "services.py"
    assert _patched_and_reached(ast.parse(services.read_text(), str(services))) == []


def test_the_wiring_check_finds_a_piece_patched_or_reached_into():
    tree = ast.parse(
        "def f(self, capture, sites):\n"
        "    capture.learner.on_change = sites.refresh\n"
        "    self.proxy.claims.verifier.start()\n"
        "    self.metrics.minutes.start(self.store)\n"
    )
    assert _patched_and_reached(tree) == [
        "2: capture.learner.on_change =",
        "3: self.proxy.claims.verifier.start",
    ]


def _shared_class_names(modules: dict[str, Path]) -> dict[str, list[str]]:
    """The public class names more than one module of ``modules`` defines, with those
    modules."""
    defined: dict[str, list[str]] = {}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(name)
    return {cls: where for cls, where in defined.items() if len(where) > 1}


def test_each_class_name_says_one_thing():
    assert _shared_class_names(_modules()) == {}


def test_the_name_check_finds_two_classes_of_one_name(tmp_path):
    (tmp_path / "a.py").write_text("class Decision:\n    pass\n\nclass _Own:\n    pass\n")
    (tmp_path / "b.py").write_text("class Decision:\n    pass\n\nclass _Own:\n    pass\n")
    modules = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert _shared_class_names(modules) == {"Decision": ["a", "b"]}
