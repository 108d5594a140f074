"""Code read from a trainer's installed source and run without importing its package.

verl's package imports Ray (and its trainer modules TransferQueue, vLLM, ...) at the top,
and its wheel is installed here without its dependencies (``requirements-trainers.txt``):
the checks it runs at startup are pure functions of its config, so they are taken from the
installed files as they stand, parsed with :mod:`ast`, and executed in a namespace of their
own holding only the names the caller gives, compiled with the trainer's own ``__future__``
imports, never this module's (string annotations change what a dataclass does).  Nothing is
copied by hand: a check that changes in the trainer's source changes here with the pinned
wheel."""
from __future__ import annotations

import ast
import builtins
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType, SimpleNamespace


class SourceChanged(LookupError):
    """The installed source no longer holds what is read from it."""


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _name_of(node: ast.stmt) -> str | None:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def definitions(path: Path, names: Iterable[str], namespace: dict) -> dict:
    """The top-level functions and assignments ``names`` of the source file ``path``,
    executed into ``namespace`` (which gives them the modules and names they use);
    returns ``namespace``.  Raises :class:`SourceChanged` when one is missing."""
    wanted = set(names)
    tree = _parse(path)
    found = [node for node in tree.body if _name_of(node) in wanted]
    missing = wanted - {_name_of(node) for node in found}
    if missing:
        raise SourceChanged(f"{path} defines no {', '.join(sorted(missing))}")
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec", dont_inherit=True), namespace)  # noqa: S102
    return namespace


def method_prologue(path: Path, class_name: str, method: str, arguments: list[str], namespace: dict) -> Callable:
    """The statements that ``class_name.method`` of ``path`` runs before it first touches
    ``self`` (the checks a constructor makes on its arguments before it builds anything),
    as a function of ``arguments`` with the globals in ``namespace``.  Raises
    :class:`SourceChanged` when the method is missing or has no such statements."""
    tree = _parse(path)
    body = next((item.body for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name
                 for item in node.body if isinstance(item, ast.FunctionDef) and item.name == method), None)
    if body is None:
        raise SourceChanged(f"{path} has no {class_name}.{method}")
    prologue = []
    for statement in body:
        if any(isinstance(n, ast.Name) and n.id == "self" for n in ast.walk(statement)):
            break
        prologue.append(statement)
    if not prologue:
        raise SourceChanged(f"{class_name}.{method} in {path} checks nothing before it touches self")
    function = ast.FunctionDef(name=f"{class_name}_{method}_prologue",
                               args=ast.arguments(posonlyargs=[], args=[ast.arg(a) for a in arguments],
                                                  kwonlyargs=[], kw_defaults=[], defaults=[]),
                               body=prologue, decorator_list=[], returns=None)
    module = ast.fix_missing_locations(ast.Module(body=[function], type_ignores=[]))
    exec(compile(module, str(path), "exec", dont_inherit=True), namespace)  # noqa: S102
    return namespace[function.name]


def substituted_builtins(path: Path, provided: dict[str, dict]) -> dict:
    """Python's builtins, except that ``from X import ...`` of a module ``X`` in ``provided``
    gets ``provided[X]``'s names instead of importing ``X`` (the source at ``path`` run
    without the packages, Ray or its environments' dependencies, it imports on the way)."""
    real_import = builtins.__import__

    def substituted_import(module, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - __import__'s
        if level == 0 and module in provided:
            missing = set(fromlist or ()) - set(provided[module])
            if missing:
                raise SourceChanged(f"{path} imports {', '.join(sorted(missing))} from {module}, not provided")
            return SimpleNamespace(**provided[module])
        return real_import(module, globals, locals, fromlist, level)

    return {**vars(builtins), "__import__": substituted_import}


def module_with_imports(path: Path, name: str, provided: dict[str, dict]) -> dict:
    """The whole source file ``path`` executed as a module named ``name``, its imports of the
    modules in ``provided`` (at the top, or inside a function when it runs) answered by
    :func:`substituted_builtins`; returns the module's namespace.  The module is registered as
    ``opdweb_trainer_source.<name>`` (dataclasses look up a class's module to read string
    annotations)."""
    module = ModuleType(f"opdweb_trainer_source.{name}")
    module.__file__ = str(path)
    module.__dict__["__builtins__"] = substituted_builtins(path, provided)
    sys.modules[module.__name__] = module
    exec(compile(_parse(path), str(path), "exec", dont_inherit=True), module.__dict__)  # noqa: S102
    return module.__dict__
