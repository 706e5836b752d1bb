"""An import-linter contract: no import cycle between modules, imports inside functions included.

import-linter's own ``acyclic_siblings`` contract looks at packages; this one looks at every module of the
``packages`` it is given and fails on each strongly connected group of two or more modules, naming the imports
that close it (file and line). Imports under ``if TYPE_CHECKING:`` are left out: they run only under the type
checker, so they cannot make an import order matter.
"""

from __future__ import annotations

from collections.abc import Iterator
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

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        # A graph of its own, without the type checker's imports (the session's graph keeps them for the others).
        packages = cast("list[str]", self.packages)
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
