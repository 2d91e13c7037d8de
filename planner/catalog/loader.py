"""YAML text → validated :class:`~planner.catalog.model.Target`, or every mistake at once.

Verification order (each step sees only what the previous ones accepted):

1. YAML syntax, via ``yaml.compose`` so every node keeps its line and column.  A
   syntax error stops here: nothing after it can be located reliably.
2. Shape and types of every key against the tables in :mod:`planner.catalog.spec`
   (unknown keys with a suggestion, missing keys, byte sizes, enums).
3. Names and references: duplicates, parents, cycles and the single root of the scope
   tree, resource classes, instance scopes, sync scopes, and each ``access`` entry's
   scope, resource and operations (which the resource must support) and its
   ``mma_operands`` (operands of tile.mma, with ``mma_read`` granted); each scope's
   ``executes`` entries (known op classes, none listed twice nor by two scopes); an llvm-cpu
   target's ``cpu`` section (present, a real CPU name, no feature twice).
4. Only if no diagnostic was recorded: build the frozen model.

All diagnostics are sorted by position and raised together as
``PlannerError(kind="catalog")``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from planner.catalog.model import (
    BUILTIN_CLASSES,
    AccessRule,
    Backend,
    BankGeometry,
    CopyEngine,
    CopyMode,
    CostModel,
    CpuIsa,
    MmaOperand,
    OpClass,
    Operation,
    Resource,
    ResourceClassDecl,
    Scope,
    SyncRule,
    Target,
)
from planner.catalog.spec import (
    INVALID,
    TARGET,
    Context,
    Object,
    Parsed,
    ParsedList,
    did_you_mean,
)
from planner.errors import Diagnostic, PlannerError, SourceLoc


def load_target_text(text: str, filename: str = "<string>") -> Target:
    """Parse and validate catalog ``text``; ``filename`` is used in diagnostics only."""
    return load_target_source(text, filename, expected_name=None)


def load_target_file(path: str | Path) -> Target:
    """Load the catalog at ``path``; its ``name`` must match the file name."""
    path = Path(path)
    return load_target_source(read_catalog_text(path), str(path), expected_name=path.stem)


def read_catalog_text(path: Path) -> str:
    """The text of a catalog file, or a located PlannerError."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise PlannerError(Diagnostic(f"cannot read catalog: {exc.strerror or exc}",
                                      SourceLoc(str(path), 0)), kind="catalog") from None
    except UnicodeDecodeError as exc:
        raise PlannerError(Diagnostic(f"catalog is not UTF-8 text (byte {exc.start})",
                                      SourceLoc(str(path), 1)), kind="catalog") from None


def load_target_source(text: str, filename: str, expected_name: str | None) -> Target:
    """Steps 1-4; ``expected_name``, when given, must equal the catalog's ``name``."""
    ctx = Context(filename)
    node = _compose(text, filename)
    top = Object(TARGET).read(node, ctx, "")
    if isinstance(top, Parsed):
        _Checker(ctx, top).run(expected_name)
    if ctx.diagnostics:
        ordered = sorted(ctx.diagnostics, key=lambda d: (d.loc.line, d.loc.col))
        raise PlannerError(ordered, kind="catalog")
    assert isinstance(top, Parsed)
    return _build(top, filename, hashlib.sha256(text.encode("utf-8")).hexdigest())


#: Deepest YAML nesting a catalog may have (catalogs are about five levels deep).
MAX_YAML_DEPTH = 32
#: Most YAML nodes a catalog may have (a built-in one has a few hundred).
MAX_YAML_NODES = 20_000
#: Digits of the longest integer a catalog may write (2**64 has 20).
MAX_INT_DIGITS = 20
_INT_TAG = "tag:yaml.org,2002:int"


def _compose(text: str, filename: str) -> yaml.Node:
    pieces = text.count("\n") + text.count(",")  # an upper bound of the nodes to come
    if pieces > MAX_YAML_NODES:  # composing costs far more than counting: refuse first
        raise PlannerError(Diagnostic(f"the catalog has more than {MAX_YAML_NODES} lines and "
                                      "flow items", SourceLoc(filename, 1), rule="yaml-size"),
                           kind="catalog")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise PlannerError(Diagnostic(f"the YAML is nested too deeply (at most "
                                      f"{MAX_YAML_DEPTH} levels)", SourceLoc(filename, 1),
                                      rule="yaml-depth"), kind="catalog") from None
    except yaml.MarkedYAMLError as exc:
        loc = _mark_loc(filename, exc.problem_mark or exc.context_mark)
        started = _mark_loc(filename, exc.context_mark)
        notes = ((started, exc.context),) if exc.context and started != loc else ()
        context = f" ({exc.context})" if exc.context else ""
        raise PlannerError(Diagnostic(f"invalid YAML: {exc.problem}{context}", loc,
                                      notes=notes), kind="catalog") from None
    except yaml.YAMLError as exc:
        raise PlannerError(Diagnostic(f"invalid YAML: {exc}", SourceLoc(filename, 1)),
                           kind="catalog") from None
    if node is None:
        raise PlannerError(Diagnostic("the catalog is empty (expected a mapping with name, "
                                      "scopes, resources, access and costs)",
                                      SourceLoc(filename, 1)), kind="catalog")
    _check_nodes(node, filename)
    return node


def _check_nodes(root: yaml.Node, filename: str) -> None:
    """Refuse nesting deeper than :data:`MAX_YAML_DEPTH`, more than :data:`MAX_YAML_NODES`
    nodes and integers longer than :data:`MAX_INT_DIGITS` digits before anything
    constructs values (an iterative walk: no recursion on hostile input)."""
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        loc = _mark_loc(filename, node.start_mark)
        seen += 1
        if seen > MAX_YAML_NODES:
            raise PlannerError(Diagnostic(f"the catalog has more than {MAX_YAML_NODES} YAML "
                                          "nodes", SourceLoc(filename, 1), rule="yaml-size"),
                               kind="catalog")
        if depth > MAX_YAML_DEPTH:
            raise PlannerError(Diagnostic(f"the YAML is nested deeper than {MAX_YAML_DEPTH} "
                                          "levels", loc, rule="yaml-depth"), kind="catalog")
        if isinstance(node, yaml.ScalarNode):
            digits = sum(ch.isdigit() for ch in node.value)
            if node.tag == _INT_TAG and digits > MAX_INT_DIGITS:
                raise PlannerError(Diagnostic(
                    f"an integer of {digits} digits; catalog numbers must fit in 64 bits",
                    loc, rule="integer-too-large"), kind="catalog")
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend(((key, depth + 1), (value, depth + 1)))


def _mark_loc(filename: str, mark: yaml.Mark | None) -> SourceLoc:
    return SourceLoc(filename, mark.line + 1, mark.column + 1) if mark else SourceLoc(filename, 1)


def _objects(value: object) -> list[Parsed]:
    """The well-formed objects of a list value (rejected ones are already reported)."""
    if not isinstance(value, ParsedList):
        return []
    return [item for item in value.items if isinstance(item, Parsed)]


def _valid(value: object) -> bool:
    return value is not INVALID and value is not None


class _Checker:
    """Step 3: names and references across the whole file."""

    def __init__(self, ctx: Context, top: Parsed) -> None:
        self.ctx, self.top = ctx, top
        self.scopes = self._unique(_objects(top["scopes"]), "scope")
        self.resources = self._unique(_objects(top["resources"]), "resource")
        self.classes = self._unique(_objects(top["classes"]), "resource class")

    def run(self, expected_name: str | None) -> None:
        name = self.top["name"]
        if expected_name is not None and _valid(name) and name != expected_name:
            self.ctx.error(self.top.at("name"), "name",
                           f"target name {name!r} does not match the file name "
                           f"{expected_name + '.yaml'!r} (a catalog is <name>.yaml)")
        self._check_classes()
        self._check_scopes()
        self._ref(self.top, "default_parallel_scope", self.scopes, "scope")
        for res in self.resources.values():
            self._check_resource(res)
        self._check_access()
        self._check_cpu()
        self._check_copy_engines()

    def _unique(self, objects: list[Parsed], what: str) -> dict[str, Parsed]:
        seen: dict[str, Parsed] = {}
        for obj in objects:
            name = obj["name"]
            if not _valid(name):
                continue
            if name in seen:
                self.ctx.error(obj.at("name"), obj.path_of("name"),
                               f"duplicate {what} name {name!r}",
                               ((seen[name].at("name"), "first defined here"),))
            else:
                seen[name] = obj
        return seen

    def _ref(self, obj: Parsed, key: str, known: dict[str, Parsed], what: str) -> None:
        name = obj[key]
        if _valid(name) and name not in known:
            self.ctx.error(obj.at(key), obj.path_of(key),
                           f"unknown {what} {name!r}{did_you_mean(str(name), list(known))}")

    def _check_classes(self) -> None:
        for name, decl in self.classes.items():
            if name in BUILTIN_CLASSES:
                self.ctx.error(decl.at("name"), decl.path_of("name"),
                               f"{name!r} is a built-in resource class; do not declare it")

    def _check_scopes(self) -> None:
        roots = [s for s in self.scopes.values() if s["parent"] is None]
        for extra in roots[1:]:
            self.ctx.error(extra.at("parent"), extra.path_of("parent"),
                           f"scope {extra['name']!r} is a second root (the root is "
                           f"{roots[0]['name']!r}); give it a parent")
        for scope in self.scopes.values():
            self._ref(scope, "parent", self.scopes, "scope")
            extent, most = scope["extent"], scope["max_extent"]
            if _valid(extent) and _valid(most) and most < extent:
                self.ctx.error(scope.at("max_extent"), scope.path_of("max_extent"),
                               f"max_extent {most} is below extent {extent}")
        # Without a root every parent is dangling, rejected, or on a cycle: all reported.
        self._check_cycles()
        self._check_executes()

    def _check_executes(self) -> None:
        """Rule S20 (execution binding): each ``executes`` entry is an op class, listed
        once, and by one scope only (which unit runs an op must have one answer)."""
        known = [c.value for c in OpClass]
        claimed: dict[str, tuple[str, SourceLoc]] = {}
        for scope in self.scopes.values():
            entries = scope["executes"]
            if not isinstance(entries, ParsedList):
                continue
            name = scope["name"]
            for i, (entry, loc) in enumerate(zip(entries.items, entries.locs, strict=True)):
                if entry is INVALID:
                    continue
                path = f"{entries.path}[{i}]"
                if entry not in known:
                    self.ctx.error(loc, path, f"scope {name!r} executes {entry!r}, which is "
                                              f"not an op class{did_you_mean(entry, known)}",
                                   rule="S20")
                elif entry in claimed:
                    other, first = claimed[entry]
                    what = "twice" if other == name else f"by scope {other!r} too"
                    self.ctx.error(loc, path, f"scope {name!r} executes {entry!r}, which is "
                                              f"listed {what}: an op class runs on one scope",
                                   ((first, "first listed here"),), rule="S20")
                else:
                    claimed[entry] = (name, loc)

    def _check_cycles(self) -> None:
        reported: set[str] = set()
        for start in self.scopes:
            chain: list[str] = []
            current = start
            while _valid(current) and current in self.scopes and current not in chain:
                chain.append(current)
                current = self.scopes[current]["parent"]
            if current not in chain or current in reported:
                continue
            cycle = chain[chain.index(current):]
            reported.update(cycle)
            scope = self.scopes[cycle[0]]
            self.ctx.error(scope.at("parent"), scope.path_of("parent"),
                           f"scopes form a cycle: {' → '.join([*cycle, cycle[0]])}")

    def _check_resource(self, res: Parsed) -> None:
        cls = res["class"]
        known_classes = [*BUILTIN_CLASSES, *self.classes]
        if _valid(cls) and cls not in known_classes:
            self.ctx.error(res.at("class"), res.path_of("class"),
                           f"unknown resource class {cls!r}{did_you_mean(cls, known_classes)};"
                           f" declare a new class under 'classes'")
        self._ref(res, "instance_scope", self.scopes, "scope")
        alignment = res["alignment"]
        if _valid(alignment) and (alignment < 1 or alignment & (alignment - 1)):
            self.ctx.error(res.at("alignment"), res.path_of("alignment"),
                           f"alignment {alignment} is not a power of two")
        self._no_repeats(res["operations"])
        self._unique(_objects(res["sync"]), "sync rule")
        for rule in _objects(res["sync"]):
            self._ref(rule, "scope", self.scopes, "scope")

    def _check_cpu(self) -> None:
        """``cpu:`` is what llvm-cpu code is compiled for, so such a target must say it."""
        cpu = self.top["cpu"]
        if self.top["backend"] is Backend.LLVM_CPU and cpu is None:
            self.ctx.error(self.top.at("backend"), "backend",
                           "backend llvm-cpu needs a 'cpu' section (vector_width, llvm_cpu, "
                           "llvm_features): code is compiled for the target, not the host")
        if not isinstance(cpu, Parsed):
            return
        if cpu["llvm_cpu"] in ("host", "native"):
            self.ctx.error(cpu.at("llvm_cpu"), cpu.path_of("llvm_cpu"),
                           f"{cpu['llvm_cpu']!r} names the machine the code happens to be "
                           "compiled on; name the CPU the target describes (e.g. x86-64-v3)")
        features = cpu["llvm_features"]
        if isinstance(features, ParsedList):
            seen: set[object] = set()
            for i, (feature, loc) in enumerate(zip(features.items, features.locs,
                                                   strict=True)):
                if feature is not INVALID and feature in seen:
                    self.ctx.error(loc, f"{features.path}[{i}]",
                                   f"feature {feature!r} listed twice")
                seen.add(feature)

    def _check_copy_engines(self) -> None:
        """Each engine names known scopes and resources, and its issuing scope may use
        them: ``copy_async`` access for an async engine (the hardware moves the data),
        ``read`` of each source and ``write`` of each destination for a prefetching one
        (the issuer copies itself)."""
        engines = _objects(self.top["copy_engines"])
        self._unique(engines, "copy engine")
        granted: dict[tuple[object, object], set[object]] = {}
        for rule in _objects(self.top["access"]):
            ops = rule["operations"]
            if isinstance(ops, ParsedList):
                granted.setdefault((rule["scope"], rule["resource"]), set()).update(ops.items)
        for eng in engines:
            self._ref(eng, "scope", self.scopes, "scope")
            for key, plain in (("from", Operation.READ), ("to", Operation.WRITE)):
                names = eng[key]
                if not isinstance(names, ParsedList):
                    continue
                for i, (res, loc) in enumerate(zip(names.items, names.locs, strict=True)):
                    if res is INVALID:
                        continue
                    path = f"{names.path}[{i}]"
                    if res not in self.resources:
                        self.ctx.error(loc, path, f"unknown resource {res!r}"
                                                  f"{did_you_mean(str(res), list(self.resources))}")
                        continue
                    need = Operation.COPY_ASYNC if eng["mode"] is CopyMode.ASYNC else plain
                    if _valid(eng["scope"]) and need not in granted.get((eng["scope"], res), ()):
                        self.ctx.error(loc, path,
                                       f"copy engine {eng['name']!r} ({eng['mode']}) is issued "
                                       f"by scope {eng['scope']!r}, which has no {need.value!r} "
                                       f"access to resource {res!r} (add it to 'access')")

    def _no_repeats(self, ops: object) -> None:
        if not isinstance(ops, ParsedList):
            return
        seen: set[object] = set()
        for i, (op, loc) in enumerate(zip(ops.items, ops.locs, strict=True)):
            if op is not INVALID and op in seen:
                self.ctx.error(loc, f"{ops.path}[{i}]", f"operation {op.value!r} listed twice")
            seen.add(op)

    def _check_access(self) -> None:
        first: dict[tuple[str, str], Parsed] = {}
        for rule in _objects(self.top["access"]):
            self._ref(rule, "scope", self.scopes, "scope")
            self._ref(rule, "resource", self.resources, "resource")
            self._no_repeats(rule["operations"])
            pair = (rule["scope"], rule["resource"])
            if pair in first:
                self.ctx.error(rule.loc, rule.path,
                               f"second access entry for scope {pair[0]!r} and resource "
                               f"{pair[1]!r}; list all operations in one entry",
                               ((first[pair].loc, "first entry"),))
            elif _valid(pair[0]) and _valid(pair[1]):
                first[pair] = rule
            self._check_supported(rule)
            self._check_mma_operands(rule)

    def _check_mma_operands(self, rule: Parsed) -> None:
        """Rule S20: ``mma_operands`` names tile.mma operands, each once, and qualifies an
        entry that grants ``mma_read`` (it says which operands that read may be)."""
        names = rule["mma_operands"]
        if not isinstance(names, ParsedList):
            return
        where = f"the access entry of scope {rule['scope']!r} on resource {rule['resource']!r}"
        known = [o.value for o in MmaOperand]
        seen: set[object] = set()
        for i, (name, loc) in enumerate(zip(names.items, names.locs, strict=True)):
            if name is INVALID:
                continue
            path = f"{names.path}[{i}]"
            if name not in known:
                self.ctx.error(loc, path, f"{where} lists mma operand {name!r}, which is not "
                                          f"a tile.mma operand{did_you_mean(str(name), known)}"
                                          "; c names the accumulator", rule="S20")
            elif name in seen:
                self.ctx.error(loc, path, f"{where} lists mma operand {name!r} twice",
                               rule="S20")
            seen.add(name)
        ops = rule["operations"]
        if isinstance(ops, ParsedList) and Operation.MMA_READ not in ops.items:
            self.ctx.error(rule.at("mma_operands"), rule.path_of("mma_operands"),
                           f"{where} lists mma_operands but does not grant 'mma_read' "
                           "(they say which operands the mma may read in place)", rule="S20")

    def _check_supported(self, rule: Parsed) -> None:
        res, ops = self.resources.get(rule["resource"]), rule["operations"]
        if res is None or not isinstance(ops, ParsedList) or not isinstance(
                res["operations"], ParsedList):
            return
        supported = res["operations"].items
        if INVALID in supported:
            return  # its rejected operation is reported; do not guess what it meant
        for i, (op, loc) in enumerate(zip(ops.items, ops.locs, strict=True)):
            if op is not INVALID and op not in supported:
                listed = ", ".join(o.value for o in supported)
                self.ctx.error(loc, f"{ops.path}[{i}]",
                               f"resource {res['name']!r} does not support {op.value!r} "
                               f"(its operations: {listed})")


# -- step 4 ----------------------------------------------------------------------------

def _build(top: Parsed, filename: str, content_hash: str) -> Target:
    return Target(
        name=top["name"],
        description=top["description"],
        backend=top["backend"],
        scopes=tuple(_scope(s) for s in _objects(top["scopes"])),
        default_parallel_scope=top["default_parallel_scope"],
        resources=tuple(_resource(r) for r in _objects(top["resources"])),
        access=tuple(_access(a) for a in _objects(top["access"])),
        costs=_costs(top["costs"]),
        classes=tuple(ResourceClassDecl(c["name"], c["description"], c.loc)
                      for c in _objects(top["classes"])),
        cpu=_cpu(top["cpu"]),
        copy_engines=tuple(_copy_engine(e) for e in _objects(top["copy_engines"])),
        content_hash=content_hash,
        source=filename,
        loc=top.loc,
    )


def _scope(s: Parsed) -> Scope:
    return Scope(s["name"], s["parent"], s["extent"], s["max_extent"], s["description"], s.loc,
                 tuple(OpClass(c) for c in _items(s["executes"])))


def _items(value: object) -> list[object]:
    return value.items if isinstance(value, ParsedList) else list(value)  # type: ignore[call-overload]


def _resource(r: Parsed) -> Resource:
    banks = r["banks"]
    return Resource(
        name=r["name"],
        resource_class=r["class"],
        instance_scope=r["instance_scope"],
        capacity=r["capacity"],
        alignment=r["alignment"],
        coherence=r["coherence"],
        operations=frozenset(r["operations"].items),
        slicing=r["slicing"],
        bandwidth=r["bandwidth"],
        latency=r["latency"],
        banks=BankGeometry(banks["count"], banks["width"], banks.loc) if banks else None,
        sync=tuple(SyncRule(s["name"], s["scope"], s["cost"], s.loc)
                   for s in _objects(r["sync"])),
        description=r["description"],
        loc=r.loc,
    )


def _access(a: Parsed) -> AccessRule:
    operands = a["mma_operands"]
    return AccessRule(a["scope"], a["resource"], frozenset(a["operations"].items), a.loc,
                      frozenset(MmaOperand(o) for o in _items(operands)) if operands
                      else frozenset(MmaOperand))


def _copy_engine(e: Parsed) -> CopyEngine:
    return CopyEngine(e["name"], e["mode"], e["scope"], tuple(e["from"].items),
                      tuple(e["to"].items), e["bandwidth"], e["issue"], e["in_flight"],
                      e["wait"], e["description"], e.loc)


def _cpu(c: object) -> CpuIsa | None:
    if not isinstance(c, Parsed):
        return None
    return CpuIsa(c["vector_width"], c["llvm_cpu"], tuple(c["llvm_features"].items), c.loc)


def _costs(c: Parsed) -> CostModel:
    return CostModel(c["clock_ghz"], c["concurrent_instances"], c["cheap"], c["transcendental"],
                     c["mma"], c["barrier"], c.loc)
