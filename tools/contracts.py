"""The import-linter contracts of our own that ``make lint`` checks beside import-linter's (``pyproject.toml``).

- ``acyclic_modules``: no import cycle between modules, imports inside functions included. It looks at every
  module of the ``packages`` it is given and fails on each strongly connected group of two or more modules,
  naming the imports that close it (file and line). Imports under ``if TYPE_CHECKING:`` are left out unless
  ``type_checking`` is true: they run only under the type checker, so they cannot make an import order matter.
- ``acyclic_apps``: no import cycle between the apps (the top-level ``packages``), imports inside functions and
  under ``if TYPE_CHECKING:`` included; each cycle is named with one import for each step of it.
- ``own_entry_points``: an app's pages and API (``<app>.web``, ``<app>.api``) are imported only from within
  the app itself and from the ``shell`` (the URL configurations): no app imports another app's views.
- ``writes_in_actions``: the database is written only from an app's ``actions`` (a module ``actions.py`` or a
  package ``actions/``) and from the ``writers`` named with their reason in ``pyproject.toml``. A write is a call
  the ORM spells one way: ``save()`` or ``delete()`` with no positional argument (a model's or a form's), a
  queryset's ``create``/``update``/``delete``/``select_for_update`` (the receiver reads as a queryset:
  ``objects``, ``filter(...)``, ``all()`` ...), and ``bulk_create``, ``bulk_update``, ``get_or_create``,
  ``update_or_create`` anywhere. A dictionary's ``update`` or a workbook's ``save(path)`` is not one.
"""

from __future__ import annotations

import ast
import fnmatch
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import grimp
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def _groups(graph: grimp.ImportGraph, modules: set[str]) -> Iterator[list[str]]:
    """Tarjan's strongly connected components of the import graph restricted to ``modules``, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & modules)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == module:
                            break
                    if len(group) > 1:
                        yield sorted(group)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))
            elif child in on_stack:
                low[module] = min(low[module], index[child])


class AcyclicModulesContract(Contract):
    type_name = "acyclic_modules"

    packages = fields.ListField(subfield=fields.StringField())
    type_checking = fields.BooleanField(required=False, default=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        # A graph of its own, without the type checker's imports unless asked (the session's graph keeps them).
        packages = cast("list[str]", self.packages)
        if not self.type_checking:
            graph = grimp.build_graph(*packages, exclude_type_checking_imports=True)
        modules = {
            module
            for package in packages
            for module in graph.find_descendants(package) | {package}
            if ".migrations" not in module
        }
        cycles = []
        for group in _groups(graph, modules):
            members = set(group)
            lines = []
            for importer in group:
                for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
                    for detail in graph.get_import_details(importer=importer, imported=imported):
                        lines.append(f"{importer} -> {imported} (l.{detail['line_number']}: {detail['line_contents']})")
            cycles.append({"modules": group, "imports": lines})
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        from importlinter.application import output

        for cycle in check.metadata["cycles"]:
            output.print_error(f"A cycle of {len(cycle['modules'])} modules: {', '.join(cycle['modules'])}")
            for line in cycle["imports"]:
                output.indent_cursor()
                output.print_error(line, bold=False)
            output.new_line()


def _app(module: str) -> str:
    return module.split(".", 1)[0]


def _detail(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    found = graph.get_import_details(importer=importer, imported=imported)
    where = f" (l.{found[0]['line_number']}: {found[0]['line_contents']})" if found else ""
    return f"{importer} -> {imported}{where}"


class AcyclicAppsContract(Contract):
    type_name = "acyclic_apps"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        apps = set(cast("list[str]", self.packages))
        # One import that stands for each app-level edge: the first found, for the message.
        example: dict[tuple[str, str], tuple[str, str]] = {}
        for importer in sorted(graph.modules):
            if _app(importer) not in apps or ".migrations" in importer:
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                edge = (_app(importer), _app(imported))
                if edge[1] in apps and edge[0] != edge[1] and ".migrations" not in imported:
                    example.setdefault(edge, (importer, imported))
        app_graph = grimp.ImportGraph()
        for app in apps:
            app_graph.add_module(app)
        for importer_app, imported_app in example:
            app_graph.add_import(importer=importer_app, imported=imported_app)
        cycles = []
        for group in _groups(app_graph, apps):
            # One shortest cycle through the group's first app, an import named for each of its steps.
            first = group[0]
            after = sorted(app_graph.find_modules_directly_imported_by(first) & set(group))[0]
            back = app_graph.find_shortest_chain(importer=after, imported=first) or (after, first)
            path = [first, *back]
            steps = [_detail(graph, *example[(a, b)]) for a, b in itertools.pairwise(path)]
            cycles.append({"modules": group, "imports": steps})
        return ContractCheck(kept=not cycles, metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        from importlinter.application import output

        for cycle in check.metadata["cycles"]:
            output.print_error(f"Apps in a cycle: {', '.join(cycle['modules'])}; one way round:")
            for line in cycle["imports"]:
                output.indent_cursor()
                output.print_error(line, bold=False)
            output.new_line()


class OwnEntryPointsContract(Contract):
    type_name = "own_entry_points"

    apps = fields.ListField(subfield=fields.StringField())
    entry_points = fields.ListField(subfield=fields.StringField())
    shell = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        shell = cast("list[str]", self.shell)
        broken = []
        for app in cast("list[str]", self.apps):
            for entry in cast("list[str]", self.entry_points):
                package = f"{app}.{entry}"
                if package not in graph.modules:
                    continue
                for module in sorted(graph.find_descendants(package) | {package}):
                    for importer in sorted(graph.find_modules_that_directly_import(module)):
                        own = _app(importer) == app
                        if not own and not any(importer == s or importer.startswith(f"{s}.") for s in shell):
                            broken.append(_detail(graph, importer, module))
        return ContractCheck(kept=not broken, metadata={"imports": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        from importlinter.application import output

        output.print_error("Another app's pages or API imported (move what they share below both):")
        for line in check.metadata["imports"]:
            output.indent_cursor()
            output.print_error(line, bold=False)
        output.new_line()


#: Calls that write whatever they are called on (no other library in the code spells them).
ALWAYS_WRITES = {"bulk_create", "bulk_update", "get_or_create", "update_or_create", "select_for_update"}
#: Calls that write when called on a queryset.
QUERYSET_WRITES = {"create", "update", "delete"}
#: What a queryset's receiver reads like: a manager or a method that returns a queryset.
QUERYSET_STEPS = {
    "objects", "filter", "exclude", "all", "select_related", "prefetch_related", "order_by", "annotate",
    "values", "values_list", "only", "defer", "using", "distinct", "select_for_update", "none",
}  # fmt: skip


def _reads_as_queryset(node: ast.expr) -> bool:
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            if node.attr in QUERYSET_STEPS:
                return True
            node = node.value
        else:
            return False


def writes_in(source: str) -> list[tuple[int, str]]:
    """The ORM writes of one module's source: (line, the call as written), in the order of the file."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        verb, receiver = node.func.attr, node.func.value
        write = (
            verb in ALWAYS_WRITES
            or (verb in {"save", "delete"} and not node.args)
            or (verb in QUERYSET_WRITES and _reads_as_queryset(receiver))
        )
        if write:
            found.append((node.lineno, ast.unparse(node).split("\n")[0][:100]))
    return sorted(found)


def _source_of(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


class WritesInActionsContract(Contract):
    type_name = "writes_in_actions"

    packages = fields.ListField(subfield=fields.StringField())
    writers = fields.ListField(subfield=fields.StringField(), required=False, default=[])
    root = fields.StringField(required=False, default=".")

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        root = Path(cast("str", self.root))
        writers = cast("list[str]", self.writers)
        broken: list[str] = []
        for package in cast("list[str]", self.packages):
            if package not in graph.modules:
                continue
            for module in sorted(graph.find_descendants(package) | {package}):
                parts = module.split(".")
                if "actions" in parts or "migrations" in parts:
                    continue
                if any(module == w or fnmatch.fnmatchcase(module, w) for w in writers):
                    continue
                path = _source_of(root, module)
                if path is None:
                    continue
                broken.extend(f"{module} l.{line}: {call}" for line, call in writes_in(path.read_text()))
        return ContractCheck(kept=not broken, metadata={"writes": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        from importlinter.application import output

        output.print_error("Writes outside an app's actions (move them into its actions module or package):")
        for line in check.metadata["writes"]:
            output.indent_cursor()
            output.print_error(line, bold=False)
        output.new_line()
