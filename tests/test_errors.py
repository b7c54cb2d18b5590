"""The messages of spacy_elmo/errors.py against the code that uses them, read from its source (AST).

* Every ``Errors.E_*`` / ``Warnings.W_*`` message is used somewhere in spacy_elmo/ (a dead message is removed).
* Every use formats the message with keywords covering all of its ``{placeholders}`` (else a KeyError
  replaces the error, at the moment it should have said what went wrong), and a message used without
  ``.format`` has no braces at all (the user would see ``{path}`` or ``{{``). A message is followed from
  ``Errors.X`` through conditional expressions, tuples, dicts and their subscripts, local and module
  names (a module's also where other modules import it: ``from .a import MSG``, ``from . import a``
  then ``a.MSG``, re-exports), class attributes and attributes set on objects (``self.MSG``,
  ``Cls.MSG``: every read of an attribute of that name, whose object is not known statically),
  arguments of spacy_elmo's own functions (``one_of(choices, Errors.X)``) and their returns, to
  the ``.format(...)`` calls it reaches; what it reaches otherwise (``ValueError(Errors.X)``, a keyword
  of another message's ``.format``) is a use without ``.format``.
* ``Errors`` and ``Warnings`` are only read as ``Errors.NAME``: no ``getattr(Errors, ...)``, no alias,
  so the above sees every use.
"""

import ast
import string
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

from spacy_elmo import errors

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "spacy_elmo"
CLASSES = {"Errors": errors.Errors, "Warnings": errors.Warnings}


def messages(classes=CLASSES) -> Dict[Tuple[str, str], str]:
    return {
        (cls_name, name): value
        for cls_name, cls in classes.items()
        for name, value in vars(cls).items()
        if name[:2] in ("E_", "W_")
    }


def placeholders(message: str) -> Set[str]:
    """The keyword names ``message.format`` needs; ValueError for a broken or positional field."""
    names = set()
    for _, field, _, spec in string.Formatter().parse(message):
        if field is None:
            continue
        name = field.split(".")[0].split("[")[0]
        if not name.isidentifier():
            raise ValueError(f"field {{{field}}} is not a keyword: format messages with keyword arguments")
        names.add(name)
        names |= placeholders(spec or "")  # a nested field of the format spec, e.g. {value:{width}}
    return names


class Module:
    def __init__(self, path: Path):
        self.path = path
        #: The dotted name imports give it (``spacy_elmo.training.trainer``: up the folders that hold an
        #: ``__init__.py``) and its package's (an ``__init__.py``'s own name).
        parts = [] if path.stem == "__init__" else [path.stem]
        folder = path.parent
        while (folder / "__init__.py").exists():
            parts.insert(0, folder.name)
            folder = folder.parent
        self.name = ".".join(parts)
        self.package = self.name if path.stem == "__init__" else ".".join(parts[:-1])
        self.tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        self.parent: Dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node

    def where(self, node: ast.AST) -> str:
        shown = self.path.relative_to(ROOT) if ROOT in self.path.parents else self.path.name
        return f"{shown}:{node.lineno}"

    def scope(self, node: ast.AST) -> ast.AST:
        """The function (or the module) whose local names ``node`` reads and writes."""
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return node
        return self.tree

    def class_body(self, node: ast.AST) -> Optional[ast.ClassDef]:
        """The class whose body holds statement ``node`` (outside any function of it), if any."""
        while node in self.parent:
            node = self.parent[node]
            if isinstance(node, ast.ClassDef):
                return node
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return None
        return None

    def imported_module(self, node: ast.ImportFrom) -> str:
        """The dotted name of the module ``from ... import`` reads from (relative imports resolved)."""
        if not node.level:
            return node.module or ""
        base = self.package.split(".") if self.package else []
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))


class Flow:
    """Where the value of an expression goes, across the modules of the package."""

    def __init__(self, modules: List[Module]):
        self.modules = modules
        self.by_name = {module.name: module for module in modules}
        self.functions: Dict[str, List[Tuple[Module, ast.AST]]] = {}
        for module in modules:
            for node in ast.walk(module.tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.functions.setdefault(node.name, []).append((module, node))

    def loads(self, module: Module, scope: ast.AST, name: str) -> Iterator[Tuple[Module, ast.AST]]:
        """The reads of ``name`` that mean the variable of ``scope``: in it, and in the functions inside it
        (closures; of a module's name: its functions) that do not assign a name of their own."""
        for node in ast.walk(scope):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                inner = module.scope(node)
                while inner is not scope and not self._assigns(inner, name):
                    inner = module.scope(inner)
                if inner is scope:
                    yield module, node

    def reads(self, module: Module, scope: ast.AST, name: str, seen=None) -> Iterator[Tuple[Module, ast.AST]]:
        """The reads of variable ``name`` of ``scope``: :meth:`loads`, and of a module's name also in the
        modules that import it: ``from M import name [as other]`` (followed on: a re-export) and
        ``m.name`` where ``m`` is the module imported (``from P import M as m``, ``import P.M as m``)."""
        yield from self.loads(module, scope, name)
        seen = set() if seen is None else seen
        if scope is not module.tree or (module.name, name) in seen:
            return
        seen.add((module.name, name))
        for other in self.modules:
            for node in ast.walk(other.tree):
                if isinstance(node, ast.ImportFrom):
                    source = other.imported_module(node)
                    for alias in node.names:
                        bound = alias.asname or alias.name
                        if source == module.name and alias.name == name:
                            yield from self.reads(other, other.scope(node), bound, seen)
                        elif f"{source}.{alias.name}".lstrip(".") == module.name:
                            yield from self._attribute_reads(other, other.scope(node), bound, name)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name == module.name and alias.asname:
                            yield from self._attribute_reads(other, other.scope(node), alias.asname, name)

    def _attribute_reads(self, module: Module, scope: ast.AST, holder: str, attr: str) -> Iterator[Tuple[Module, ast.AST]]:
        """The reads of ``holder.attr`` where ``holder`` is the variable of ``scope``."""
        for load_module, load in self.loads(module, scope, holder):
            parent = load_module.parent.get(load)
            if isinstance(parent, ast.Attribute) and parent.attr == attr:
                yield load_module, parent

    def attribute_reads(self, attr: str) -> Iterator[Tuple[Module, ast.AST]]:
        """Every read of an attribute named ``attr`` in the package (of ``self``, a class, an instance:
        which object it is, is not known here, so all of them)."""
        for module in self.modules:
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.ctx, ast.Load):
                    yield module, node

    @staticmethod
    def _assigns(scope: ast.AST, name: str) -> bool:
        args = getattr(scope, "args", None)
        if args is not None and name in {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}:
            return True
        return any(
            (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store))
            or (isinstance(n, ast.alias) and (n.asname or n.name.split(".")[0]) == name)
            for n in ast.walk(scope)
        )

    def uses(self, module: Module, node: ast.AST, seen=None) -> Iterator[Tuple[str, Module, ast.AST]]:
        """``("format", module, call)`` for each ``.format(...)`` call the value of ``node`` reaches, and
        ``("bare", module, node)`` for each place it is used as it is."""
        seen = set() if seen is None else seen
        if (module.path, id(node)) in seen:
            return
        seen.add((module.path, id(node)))
        parent = module.parent.get(node)
        # The value passes on unchanged (or with more text) into the enclosing expression.
        if (
            (isinstance(parent, ast.IfExp) and node is not parent.test)
            or isinstance(parent, (ast.Tuple, ast.List, ast.Set, ast.Starred))
            or (isinstance(parent, ast.Dict) and node in parent.values)
            or (isinstance(parent, ast.Subscript) and node is parent.value)
            or (isinstance(parent, ast.BoolOp))
            or (isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add))
        ):
            yield from self.uses(module, parent, seen)
        elif isinstance(parent, ast.Attribute) and parent.attr == "format" and isinstance(module.parent.get(parent), ast.Call):
            yield "format", module, module.parent[parent]
        elif isinstance(parent, ast.Compare) and node in parent.comparators and all(
            isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops
        ):
            return  # ``key in CONTAINER``: the messages in it are not used here
        elif isinstance(parent, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in parent.ops) and all(
            isinstance(side, ast.Constant) and side.value is None for side in [parent.left, *parent.comparators]
            if side is not node
        ):
            return  # ``message is not None``: an optional message tested, not used
        elif isinstance(parent, (ast.Assign, ast.AnnAssign, ast.For)) and node is _assigned(parent):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if all(isinstance(t, ast.Attribute) for t in targets):  # ``self.message = Errors.X``
                for target in targets:
                    for load_module, load in self.attribute_reads(target.attr):
                        yield from self.uses(load_module, load, seen)
                return
            names = [_stored_names(t) for t in targets]
            if any(n is None for n in names):
                yield "bare", module, node  # stored in an item (or unpacked onto attributes): not followed
                return
            scope, owner = module.scope(parent), module.class_body(parent)
            for name in [n for group in names for n in group]:
                if owner is not None:  # a class attribute: read as ``self.NAME``, ``Cls.NAME``, ... or in the body
                    reads = [(load_module, load) for load_module, load in self.attribute_reads(name)]
                    reads += [(module, load) for load in ast.walk(owner) if isinstance(load, ast.Name)
                              and load.id == name and isinstance(load.ctx, ast.Load) and module.class_body(load) is owner]
                else:
                    reads = list(self.reads(module, scope, name))
                for load_module, load in reads:
                    yield from self.uses(load_module, load, seen)
        elif isinstance(parent, ast.Return):
            function = module.scope(parent)
            name = getattr(function, "name", None)
            calls = list(self._calls(name)) if name else []
            if not calls:
                yield "bare", module, node
            for call_module, call in calls:
                yield from self.uses(call_module, call, seen)
        elif isinstance(parent, ast.Call) and node is not parent.func:
            params = list(self._params(parent, node))
            if not params:
                yield "bare", module, node  # an argument of a function not of this package (ValueError, append, ...)
            for def_module, function, param in params:
                for load_module, load in self.loads(def_module, function, param):
                    yield from self.uses(load_module, load, seen)
        elif isinstance(parent, ast.keyword):
            yield from self.uses(module, parent, seen)  # the keyword node's parent is the call
        else:
            yield "bare", module, node

    def _calls(self, name: str) -> Iterator[Tuple[Module, ast.Call]]:
        for module in self.modules:
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Call) and _callee(node) == name:
                    yield module, node

    def _params(self, call: ast.Call, arg: ast.AST) -> Iterator[Tuple[Module, ast.AST, str]]:
        """``(module, function, parameter)`` of each function of the package named like the callee that
        ``arg`` (a positional argument or a keyword's node) is passed to."""
        for module, function in self.functions.get(_callee(call) or "", []):
            args = function.args
            positional = [a.arg for a in args.posonlyargs + args.args]
            if positional and positional[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
                positional = positional[1:]
            if isinstance(arg, ast.keyword):
                if arg.arg in positional + [a.arg for a in args.kwonlyargs]:
                    yield module, function, arg.arg
            elif arg in call.args and call.args.index(arg) < len(positional):
                yield module, function, positional[call.args.index(arg)]


def _assigned(statement: ast.AST) -> ast.AST:
    """The value an assignment or a ``for`` loop (its iterable) binds to its target."""
    return statement.iter if isinstance(statement, ast.For) else statement.value


def _stored_names(target: ast.AST) -> Optional[List[str]]:
    """The names an assignment to ``target`` binds; None when it stores elsewhere (an attribute, an item)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _stored_names(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        names = [_stored_names(e) for e in target.elts]
        return None if any(n is None for n in names) else [n for group in names for n in group]
    return None


def _callee(call: ast.Call) -> Optional[str]:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def references(modules: List[Module]) -> Iterator[Tuple[Module, ast.Attribute]]:
    for module in modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in CLASSES:
                yield module, node


def check(modules: List[Module], known: Dict[Tuple[str, str], str]) -> List[str]:
    """What is wrong with the messages ``known`` as ``modules`` use them (empty: nothing)."""
    problems, used = [], set()
    for key, message in known.items():
        try:
            placeholders(message)
        except ValueError as err:
            problems.append(f"{key[0]}.{key[1]}: {err}")
    for module in modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Name) and node.id in CLASSES and isinstance(node.ctx, ast.Load):
                if not (isinstance(module.parent.get(node), ast.Attribute) and module.parent[node].value is node):
                    problems.append(f"{module.where(node)}: {node.id} is used other than as {node.id}.NAME")
    flow = Flow(modules)
    for module, ref in references(modules):
        key = (ref.value.id, ref.attr)
        label = f"{key[0]}.{key[1]}"
        if key not in known:
            problems.append(f"{module.where(ref)}: {label} is not a message of spacy_elmo/errors.py")
            continue
        used.add(key)
        message = known[key]
        try:
            needed = placeholders(message)
        except ValueError:
            continue
        for kind, use_module, use in flow.uses(module, ref):
            if kind == "bare":
                if "{" in message or "}" in message:
                    problems.append(f"{use_module.where(use)}: {label} is used without .format but has braces")
                continue
            if use.args or any(k.arg is None for k in use.keywords):
                problems.append(f"{use_module.where(use)}: {label}.format(...) takes keyword arguments only")
                continue
            missing = needed - {k.arg for k in use.keywords}
            if missing:
                problems.append(f"{use_module.where(use)}: {label}.format(...) lacks {sorted(missing)}")
    problems += [f"{cls}.{name} is used nowhere in spacy_elmo/: remove it" for cls, name in sorted(set(known) - used)]
    return problems


def package_modules() -> List[Module]:
    """The package's modules, and build_flags.py (setup.py's messages, read from errors.py by path)."""
    paths = [path for path in sorted(PACKAGE.rglob("*.py")) if path != PACKAGE / "errors.py"]
    return [Module(path) for path in paths + [PACKAGE.parent / "build_flags.py"]]


def test_messages_match_their_uses():
    problems = check(package_modules(), messages())
    assert not problems, "\n".join(problems)


def assert_found(problems: List[str], expected: Optional[str]) -> None:
    """``expected`` is among ``problems`` (None: there are none)."""
    if expected is None:
        assert problems == []
    else:
        assert any(expected in p for p in problems), problems


def _planted(tmp_path: Path, source: str) -> List[Module]:
    path = tmp_path / "planted.py"
    path.write_text(source, encoding="utf-8")
    return [Module(path)]


@pytest.mark.parametrize(
    "source,expected",
    [
        ("raise ValueError(Errors.E_A.format(path=1))", "lacks ['name']"),
        ("raise ValueError(Errors.E_A.format(path=1, name=2, extra=3))\nprint(Errors.E_B)", None),
        ("raise ValueError(Errors.E_B.format(1))\nprint(Errors.E_A.format(name=1, path=2))", "keyword arguments only"),
        ("raise ValueError(Errors.E_A)\nprint(Errors.E_B)", "used without .format but has braces"),
        ("m = Errors.E_A if x else Errors.E_B\nraise ValueError(m.format(path=1))", "lacks ['name']"),
        ("T = {'a': (Errors.E_A, Errors.E_B)}\ndef f(k):\n    left, right = T[k]\n    m = left if k else right\n"
         "    return m.format(path=1)", "lacks ['name']"),
        ("def one_of(c, message):\n    return message.format(name=c)\nx = one_of(1, Errors.E_A)\nprint(Errors.E_B)",
         "lacks ['path']"),
        ("def pick():\n    return Errors.E_A\nprint(pick().format(name=1, path=2), Errors.E_B)", None),
        ("def pick():\n    return Errors.E_A\nprint(pick(), Errors.E_B)", "used without .format but has braces"),
        ("for m in (Errors.E_A, Errors.E_B):\n    print(m.format(name=1))", "lacks ['path']"),
        ("T = (Errors.E_A,)\nif x in T:\n    print(Errors.E_A.format(name=1, path=2), Errors.E_B)", None),
        ("def read(m=None):\n    if m is not None:\n        raise ValueError(m.format(name=1, path=2))\n"
         "read(Errors.E_A)\nprint(Errors.E_B)", None),
        ("def read(m=None):\n    if None is m:\n        return\n    raise ValueError(m.format(name=1))\n"
         "read(Errors.E_A)\nprint(Errors.E_B)", "lacks ['path']"),
        ("def read(m=None):\n    if m is not None:\n        raise ValueError(m)\nread(Errors.E_A)\nprint(Errors.E_B)",
         "used without .format but has braces"),
        ("print(Errors.E_A.format(name=1, path=2))", "Errors.E_B is used nowhere"),
        ("print(Errors.E_A.format(name=1, path=2), Errors.E_B, Errors.E_GONE)", "E_GONE is not a message"),
        ("print(Errors.E_A.format(name=1, path=2), Errors.E_B, getattr(Errors, 'E_B'))", "used other than as Errors.NAME"),
    ],
)
def test_check_finds_planted_mismatches(tmp_path, source, expected):
    """The check itself, on planted code: each mismatch it must find (None: a correct use it must accept)."""
    known = {("Errors", "E_A"): "{name!r} at {path}", ("Errors", "E_B"): "no placeholders"}
    problems = check(_planted(tmp_path, source), known)
    assert_found(problems, expected)


A_CONSTANT = "MSG = Errors.E_A\nprint(Errors.E_B)\n"  # pkg/a.py: a module's name holding a message
A_CLASS = "print(Errors.E_B)\nclass C:\n    MSG = Errors.E_A\n"  # pkg/a.py: a class attribute holding it


@pytest.mark.parametrize(
    "files,expected",
    [
        # a module constant, read in another module: imported, aliased, absolute, re-exported, its module imported
        ({"a": A_CONSTANT, "b": "from .a import MSG\nraise ValueError(MSG.format(name=1))"}, "b.py:2: Errors.E_A.format(...) lacks ['path']"),
        ({"a": A_CONSTANT, "b": "from .a import MSG\nraise ValueError(MSG.format(name=1, path=2))"}, None),
        ({"a": A_CONSTANT, "b": "from pkg.a import MSG as M\nraise ValueError(M.format(path=1))"}, "lacks ['name']"),
        ({"a": A_CONSTANT, "b": "def f():\n    from .a import MSG\n    return MSG\nraise ValueError(f())"},
         "used without .format but has braces"),
        ({"a": A_CONSTANT, "__init__": "from .a import MSG", "sub/__init__": "", "sub/c": "from .. import MSG\nMSG.format(name=1)"},
         "c.py:2: Errors.E_A.format(...) lacks ['path']"),
        ({"a": A_CONSTANT, "b": "from . import a as mod\nraise ValueError(mod.MSG.format(name=1))"}, "lacks ['path']"),
        ({"a": A_CONSTANT, "b": "import pkg.a as mod\nraise ValueError(mod.MSG.format(name=1))"}, "lacks ['path']"),
        # a class attribute: read on the instance, on the class in another module, or in the class body
        ({"a": A_CLASS + "    def f(self):\n        return self.MSG.format(name=1)"}, "lacks ['path']"),
        ({"a": A_CLASS, "b": "from .a import C\nraise ValueError(C.MSG.format(path=1, name=2))"}, None),
        ({"a": A_CLASS, "b": "from .a import C\nraise ValueError(C.MSG.format(path=1))"}, "lacks ['name']"),
        ({"a": "class C:\n    MSG = Errors.E_A\n    TEXT = MSG.format(name=1)\nprint(Errors.E_B)"}, "lacks ['path']"),
        # an instance attribute
        ({"a": "class C:\n    def __init__(self):\n        self.m = Errors.E_A\n    def f(self):\n        return self.m.format(name=1)\n"
               "print(Errors.E_B)"}, "lacks ['path']"),
    ],
)
def test_check_follows_messages_across_modules_and_classes(tmp_path, files, expected):
    """Planted packages (``pkg/NAME.py`` for each key): a message reached through another module's
    import of a constant, or through a class or instance attribute, is checked at its ``.format``."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(files.get("__init__", ""), encoding="utf-8")
    for name, source in files.items():
        path = tmp_path / "pkg" / f"{name}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(source, encoding="utf-8")
    modules = [Module(path) for path in sorted((tmp_path / "pkg").rglob("*.py"))]
    problems = check(modules, {("Errors", "E_A"): "{name!r} at {path}", ("Errors", "E_B"): "no placeholders"})
    assert_found(problems, expected)


def test_check_finds_a_broken_message():
    assert any("not a keyword" in p for p in check([], {("Errors", "E_X"): "at {0}"}))
    assert any("Single '}'" in p for p in check([], {("Errors", "E_X"): "a } b"}))


def test_counted_words_a_count_and_every_layer_uses_the_one_helper():
    """The CLI had its own ``counted`` (an "s" only) and training/data.py wrote "1 directory"/"N directories"
    inline, as ops' describe_state did "item"/"items": one helper, beside the messages, for every layer."""
    import importlib

    assert errors.counted(1, "step") == "1 step" and errors.counted(0, "step") == "0 steps"
    assert errors.counted(1024, "token") == "1,024 tokens"
    assert errors.counted(1, "directory", "directories") == "1 directory"
    assert errors.counted(3, "directory", "directories") == "3 directories"
    for name in ("spacy_elmo.cli.pretrain", "spacy_elmo.cli.embed", "spacy_elmo.cli.evaluate", "spacy_elmo.cli.fit_state",
                 "spacy_elmo.cli.demo", "spacy_elmo.training.data", "spacy_elmo.ops.reference"):
        assert importlib.import_module(name).counted is errors.counted, name
    assert not hasattr(importlib.import_module("spacy_elmo.cli.app"), "counted")  # no second copy
    from spacy_elmo.ops.reference import describe_state

    assert describe_state(([],)) == "a tuple of 1 item (a list of 0 items ())"


def test_no_message_is_defined_twice():
    """A second ``E_X = ...`` in Errors (or Warnings) silently replaces the first for every use: a new --options
    message named E_OPTIONS_NOT_OBJECT once replaced BiLMConfig.from_allennlp_options' own, found only by
    test_messages_match_their_uses because the two took other fields."""
    import collections

    tree = ast.parse((PACKAGE / "errors.py").read_text(encoding="utf-8"))
    for cls in (node for node in tree.body if isinstance(node, ast.ClassDef)):
        names = [target.id for node in cls.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                 for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                 if isinstance(target, ast.Name)]
        twice = sorted(name for name, n in collections.Counter(names).items() if n > 1)
        assert not twice, f"{cls.name} defines {twice} more than once"


@pytest.mark.parametrize("name, said", [
    ("int", "an int"), ("object", "an object"), ("ellipsis", "an ellipsis"), ("OrderedDict", "an OrderedDict"),
    ("float", "a float"), ("str", "a str"), ("NoneType", "a NoneType"), ("Tensor", "a Tensor"),
    ("torch.int64 tensor", "a torch.int64 tensor"), ("ndarray", "an ndarray"), ("NDArray", "an NDArray"),
    ("LSTM", "an LSTM"), ("OSError", "an OSError"), ("UUID", "a UUID"), ("uint8", "a uint8"),
    ("UserDict", "a UserDict"), ("ufunc", "a ufunc"), ("h5py", "an h5py"), ("", "a "),
    ("_ElmoBiLm", "an _ElmoBiLm"), ("_Tensor", "a _Tensor"), ("__ndarray", "an __ndarray"), ("_", "a _"),
    ("Unit", "a Unit"), ("uuid", "a uuid"), ("Usual", "a Usual"), ("utility", "a utility"),
    ("EuclideanDistance", "a EuclideanDistance"), ("OneHot", "a OneHot"), ("Other", "an Other"),
])
def test_with_article_says_a_type_name_as_it_is_said(name, said):
    assert errors.with_article(name) == said


def test_no_message_puts_a_bare_a_before_a_type_name():
    """E_TOKEN_NOT_STR said "Token 1 of sentence 0 is a int" (and a dozen messages alike "a ndarray", "a object"):
    every message that names a type after its article takes both from ``with_article`` ({a_type})."""
    import re

    for cls in (errors.Errors, errors.Warnings):
        for name, message in vars(cls).items():
            if name[:2] in ("E_", "W_") and isinstance(message, str):
                assert not re.search(r"\ban? \{(type_name|type|a_type)\}", message), name
    from spacy_elmo.chars import batch_to_ids

    for token, said in ((3, "an int"), (3.5, "a float"), (object(), "an object"), (None, "a NoneType")):
        with pytest.raises(TypeError, match=f"^Token 1 of sentence 0 is {said}, not a str"):
            batch_to_ids([["ok", token]])
