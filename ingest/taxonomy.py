"""The operator taxonomy: op chain and kernel name → canonical operator, rules loaded from YAML."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from catalogue.operators import MODELLED_OPERATORS, OPERATORS, folder
from ingest.plain import plain

# The rules of no operator (copies, collectives, `other`, roles, backward); each operator's own rules are in its
# folder (catalogue/operators/<op>/taxonomy.yaml), merged with these by rank.
DEFAULT_PATH = Path(__file__).with_name("taxonomy.yaml")
RULE_SECTIONS = ("op_rules", "kernel_rules")
OTHER = "other"


class TaxonomyError(ValueError):
    """A taxonomy file that cannot be used, with the file and the problem named."""


@dataclass(frozen=True)
class Rule:
    """One rule: an op-name and/or kernel-name pattern and the operator it assigns."""

    operator: str
    op: re.Pattern | None
    kernel: re.Pattern | None
    where: str  # "op_rules[3]" — names the rule in messages and in tests
    encloses: bool = False  # claims every kernel launched inside its op, whatever ops nest within


@dataclass(frozen=True)
class Role:
    """What a kernel does whatever op launched it, when its name says it is no operator's compute: a copy or
    cast, a fill, a collective, a reduction, a GEMM op's elementwise arithmetic. Decided before the op rules, so that a cast inside aten::linear
    is no GEMM; `within` limits it to rows whose op rules chose one of those operators (a reduction is a
    norm's own work, but not a GEMM's or an attention's)."""

    name: str  # "copy", "fill", "communication", "reduction", "elementwise": names the rule in messages (roles.copy)
    operator: str
    kernel: re.Pattern
    within: frozenset[str] | None = None  # None: whatever the op rules chose


@dataclass(frozen=True)
class Backward:
    """What marks an activity as backward-pass work: an op in its chain, or (without one) its kernel name."""

    op: re.Pattern
    kernel: re.Pattern
    keeps: frozenset[str]  # operators that stay what they are in the backward pass (communication, copies)


@dataclass(frozen=True)
class Match:
    """The operator chosen for one activity, the op-chain position that decided it, and how."""

    operator: str
    depth: int | None  # index into op_chain of the deciding op; None when decided by name/category
    rule: str  # "op_rules[3]", "categories.memcpy", "kernel_rules[7]", "backward" or "none"


@dataclass
class Taxonomy:
    """Validated rules; `classify` memoises per distinct (kernel, category, op chain)."""

    path: str
    operators: tuple[str, ...]
    categories: dict[str, str]
    op_rules: tuple[Rule, ...]
    kernel_rules: tuple[Rule, ...]
    backward: Backward | None = None
    blit_kernels: dict[str, re.Pattern] = field(default_factory=dict)  # category -> kernel-name pattern
    roles: tuple[Role, ...] = ()
    _memo: dict = field(default_factory=dict, repr=False)
    _op_memo: dict = field(default_factory=dict, repr=False)
    _kernel_memo: dict = field(default_factory=dict, repr=False)

    def classify(self, kernel: str, category: str, op_chain: list[str] | tuple[str, ...] | None) -> Match:
        """The operator of one GPU activity: op rules innermost-first, then category, then kernel name."""
        key = (kernel, category, tuple(op_chain) if op_chain is not None else ())
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._classify(*key)
        return hit

    def _classify(self, kernel: str, category: str, chain: tuple[str, ...]) -> Match:
        kernel = kernel or ""
        category = next((c for c, pattern in self.blit_kernels.items() if pattern.search(kernel)), category)
        if category in self.categories:
            # A copy or fill is that whatever op issued it (cuBLAS workspace memsets under aten::mm).
            return Match(self.categories[category], None, f"categories.{category}")
        match = self._role(kernel, self._forward(kernel, chain))
        bw = self.backward
        if bw is None or match.operator in bw.keeps:
            return match
        for depth in range(len(chain) - 1, -1, -1):
            if bw.op.search(chain[depth]):
                return Match(OTHER, depth, "backward")
        if bw.kernel.search(kernel):
            return Match(OTHER, match.depth, "backward")
        return match

    def _role(self, kernel: str, match: Match) -> Match:
        """`match`, unless the kernel's role says it is a copy, fill, collective or reduction there."""
        for role in self.roles:
            if (role.within is None or match.operator in role.within) and role.kernel.search(kernel):
                return Match(role.operator, None, f"roles.{role.name}")  # no op's shape is its work
        return match

    def role_of(self, kernel: str, operator: str) -> str | None:
        """The role (copy, fill, communication, reduction) a kernel has inside work of `operator`, or None
        where its name says it may be that operator's compute (the release's admission check asks this)."""
        for role in self.roles:
            if (role.within is None or operator in role.within) and role.kernel.search(kernel or ""):
                return None if role.operator == operator else role.name  # a copy is memcpy's own work
        return None

    def _op_rules_of(self, name: str) -> tuple[Rule, ...]:
        """The op rules whose op pattern matches `name`, in rule order (memoised per name)."""
        hit = self._op_memo.get(name)
        if hit is None:
            hit = self._op_memo[name] = tuple(rule for rule in self.op_rules if rule.op.search(name))
        return hit

    def _kernel_found(self, rule: Rule, kernel: str) -> bool:
        """Whether `rule`'s kernel pattern occurs in `kernel` (memoised per rule and kernel name)."""
        key = (rule.where, kernel)
        hit = self._kernel_memo.get(key)
        if hit is None:
            hit = self._kernel_memo[key] = rule.kernel.search(kernel) is not None
        return hit

    def _forward(self, kernel: str, chain: tuple[str, ...]) -> Match:
        """_forward_plain with each op name's matching rules, and each kernel name's match of a rule's kernel
        pattern, found once per taxonomy: a trace's combinations repeat a few dozen op and kernel names, and
        searching every rule for each (kernel names run to hundreds of characters) was most of classifying
        them. Tuned for speed (oracle: tests/ingest/test_fast_paths.py)."""
        if plain():
            return self._forward_plain(kernel, chain)
        matching = [self._op_rules_of(name) for name in chain]
        for depth in range(len(chain) - 1, -1, -1):
            for rule in matching[depth]:
                if rule.encloses and (rule.kernel is None or self._kernel_found(rule, kernel)):
                    return Match(rule.operator, depth, rule.where)
        for depth in range(len(chain) - 1, -1, -1):
            for rule in matching[depth]:
                if rule.kernel is None or self._kernel_found(rule, kernel):
                    return Match(rule.operator, depth, rule.where)
        for rule in self.kernel_rules:
            if self._kernel_found(rule, kernel):
                return Match(rule.operator, None, rule.where)
        return Match(OTHER, None, "none")

    def _forward_plain(self, kernel: str, chain: tuple[str, ...]) -> Match:
        """Op rules innermost-first (rules that enclose first), then kernel-name rules: every rule tried in turn."""
        for depth in range(len(chain) - 1, -1, -1):
            for rule in self.op_rules:
                if rule.encloses and rule.op.search(chain[depth]) and (rule.kernel is None or rule.kernel.search(kernel)):
                    return Match(rule.operator, depth, rule.where)
        for depth in range(len(chain) - 1, -1, -1):
            name = chain[depth]
            for rule in self.op_rules:
                if rule.op.search(name) and (rule.kernel is None or rule.kernel.search(kernel)):
                    return Match(rule.operator, depth, rule.where)
        for rule in self.kernel_rules:
            if rule.kernel.search(kernel):
                return Match(rule.operator, None, rule.where)
        return Match(OTHER, None, "none")

    def operator_of_kernel(self, kernel: str, category: str = "kernel") -> str:
        """The operator a kernel name alone maps to (graph replays without a capture trace)."""
        return self.classify(kernel, category, ()).operator


def _compile(path: str, where: str, field_name: str, pattern) -> re.Pattern | None:
    if pattern is None:
        return None
    if not isinstance(pattern, str) or not pattern:
        raise TaxonomyError(f"{path}: {where}.{field_name} must be a non-empty string")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise TaxonomyError(f"{path}: {where}.{field_name} is not a valid regex ({exc})") from None


def _rules(path: str, doc: dict, section: str, operators: set[str], need: str) -> tuple[Rule, ...]:
    raw = doc.get(section)
    if not isinstance(raw, list):
        raise TaxonomyError(f"{path}: `{section}` must be a list of rules")
    rules = []
    for i, item in enumerate(raw):
        where = f"{section}[{i}]"
        if not isinstance(item, dict):
            raise TaxonomyError(f"{path}: {where} must be a mapping")
        unknown = set(item) - {"operator", "op", "kernel", "encloses", "rank"}
        if unknown:
            raise TaxonomyError(f"{path}: {where} has unknown keys {sorted(unknown)}")
        operator = item.get("operator")
        if operator not in operators:
            raise TaxonomyError(f"{path}: {where} names operator {operator!r}, not in `operators`")
        if item.get(need) is None:
            raise TaxonomyError(f"{path}: {where} needs a `{need}` pattern")
        op = _compile(path, where, "op", item.get("op"))
        kernel = _compile(path, where, "kernel", item.get("kernel"))
        rules.append(Rule(operator, op, kernel, where, bool(item.get("encloses", False))))
    return tuple(rules)


def _backward(path: str, doc: dict, operators: set[str]) -> Backward | None:
    raw = doc.get("backward")
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"op", "kernel", "keeps"}:
        raise TaxonomyError(f"{path}: `backward` must be a mapping of op, kernel and keeps")
    keeps = raw.get("keeps") or []
    if not isinstance(keeps, list) or any(k not in operators for k in keeps):
        raise TaxonomyError(f"{path}: backward.keeps must list operators from `operators`")
    op = _compile(path, "backward", "op", raw.get("op"))
    kernel = _compile(path, "backward", "kernel", raw.get("kernel"))
    if op is None or kernel is None:
        raise TaxonomyError(f"{path}: backward needs an `op` and a `kernel` pattern")
    return Backward(op, kernel, frozenset(keeps))


def _blits(path: str, doc: dict, categories: dict) -> dict[str, re.Pattern]:
    raw = doc.get("blit_kernels") or {}
    if not isinstance(raw, dict) or any(c not in categories for c in raw):
        raise TaxonomyError(f"{path}: `blit_kernels` must map categories of `categories` to kernel patterns")
    return {c: _compile(path, "blit_kernels", c, p) for c, p in raw.items()}


def _roles(path: str, doc: dict, operators: set[str]) -> tuple[Role, ...]:
    raw = doc.get("roles") or []
    if not isinstance(raw, list):
        raise TaxonomyError(f"{path}: `roles` must be a list of roles")
    out = []
    for i, item in enumerate(raw):
        where = f"roles[{i}]"
        if not isinstance(item, dict) or set(item) - {"role", "operator", "kernel", "within"}:
            raise TaxonomyError(f"{path}: {where} must be a mapping of role, operator, kernel and within")
        name, operator, within = item.get("role"), item.get("operator"), item.get("within")
        if not isinstance(name, str) or not name:
            raise TaxonomyError(f"{path}: {where} needs a `role` name")
        if operator not in operators:
            raise TaxonomyError(f"{path}: {where} names operator {operator!r}, not in `operators`")
        if within is not None and (not isinstance(within, list) or any(w not in operators for w in within)):
            raise TaxonomyError(f"{path}: {where}.within must list operators from `operators`")
        kernel = _compile(path, where, "kernel", item.get("kernel"))
        if kernel is None:
            raise TaxonomyError(f"{path}: {where} needs a `kernel` pattern")
        out.append(Role(name, operator, kernel, None if within is None else frozenset(within)))
    return tuple(out)


def parse_taxonomy(doc, path: str = "<taxonomy>") -> Taxonomy:
    """A Taxonomy from an already-parsed YAML document, validated; TaxonomyError names the problem."""
    if not isinstance(doc, dict):
        raise TaxonomyError(f"{path}: top level must be a mapping")
    operators = doc.get("operators")
    if not isinstance(operators, list) or not all(isinstance(o, str) for o in operators):
        raise TaxonomyError(f"{path}: `operators` must be a list of names")
    if OTHER not in operators:
        raise TaxonomyError(f"{path}: `operators` must include {OTHER!r}")
    if len(set(operators)) != len(operators):
        raise TaxonomyError(f"{path}: `operators` has duplicates")
    known = set(operators)
    categories = doc.get("categories") or {}
    if not isinstance(categories, dict) or any(v not in known for v in categories.values()):
        raise TaxonomyError(f"{path}: `categories` must map categories to listed operators")
    return Taxonomy(
        path=path,
        operators=tuple(operators),
        categories=dict(categories),
        op_rules=_rules(path, doc, "op_rules", known, "op"),
        kernel_rules=_rules(path, doc, "kernel_rules", known, "kernel"),
        backward=_backward(path, doc, known),
        blit_kernels=_blits(path, doc, categories),
        roles=_roles(path, doc, known),
    )


def load_taxonomy(path: str | Path | None = None) -> Taxonomy:
    """The taxonomy at `path` (default: the one shipped in the package), validated."""
    if path is None:
        return _default()
    return _load(Path(path))


@lru_cache(maxsize=1)
def _default() -> Taxonomy:
    return parse_taxonomy(default_document(), str(DEFAULT_PATH))


def default_document() -> dict:
    """ingest/taxonomy.yaml with every operator folder's rules merged in: each section's rules in rank order
    (a rank says where a rule is tried among all operators' rules, the lowest first; two rules of one rank are
    refused, as their order would be the files' order)."""
    doc = _document(DEFAULT_PATH)
    if not isinstance(doc, dict):
        raise TaxonomyError(f"{DEFAULT_PATH}: top level must be a mapping")
    names = OPERATORS + MODELLED_OPERATORS
    doc["operators"] = list(names) + list(doc.get("operators") or [])
    ranked = {section: [(DEFAULT_PATH, item) for item in doc.get(section) or []] for section in RULE_SECTIONS}
    for name in names:
        path = folder(name) / "taxonomy.yaml"
        own = _document(path)
        if not isinstance(own, dict) or set(own) - set(RULE_SECTIONS):
            raise TaxonomyError(f"{path}: must be a mapping of {' and '.join(RULE_SECTIONS)}")
        for section in RULE_SECTIONS:
            for item in own.get(section) or []:
                if not isinstance(item, dict) or "operator" in item:
                    raise TaxonomyError(f"{path}: each of {section} is a mapping without `operator` (the folder names it)")
                ranked[section].append((path, {**item, "operator": name}))
    for section, rules in ranked.items():
        seen: dict[int, Path] = {}
        for path, item in rules:
            rank = item.get("rank") if isinstance(item, dict) else None
            if not isinstance(rank, int) or isinstance(rank, bool):
                raise TaxonomyError(f"{path}: every rule of {section} needs an integer `rank`")
            if rank in seen:
                raise TaxonomyError(f"{path}: {section} rank {rank} is taken already (by a rule in {seen[rank]})")
            seen[rank] = path
        doc[section] = [item for _, item in sorted(rules, key=lambda r: r[1]["rank"])]
    return doc


def _load(path: Path) -> Taxonomy:
    return parse_taxonomy(_document(path), str(path))


def _document(path: Path):
    import yaml

    try:
        # libyaml's loader where pyyaml has it (a third of the default taxonomy's load time); same document.
        return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as exc:
        raise TaxonomyError(f"{path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise TaxonomyError(f"{path}: invalid YAML ({exc})") from None
