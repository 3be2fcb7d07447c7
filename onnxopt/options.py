"""What a user can ask of the optimizer, in one place shared by the CLI and the API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class FusionUnit:
    """One fusion region held back: ``rule`` where it ends at node ``root``."""

    rule: str
    root: str
    kind: ClassVar[str] = "fusion"

    def __str__(self) -> str:
        return f"fuse:{self.rule}@{self.root}"

    def describe(self) -> str:
        return f"rule {self.rule} at node {self.root}"


@dataclass(frozen=True)
class PassUnit:
    """A normalization pass held back, for the whole model (a pass works on the whole model and
    cannot be switched off per region)."""

    name: str
    kind: ClassVar[str] = "pass"

    def __str__(self) -> str:
        return f"pass:{self.name}"

    def describe(self) -> str:
        return (f"normalization pass {self.name} (switched off for the whole model: a pass "
                "cannot be switched off per region)")


@dataclass(frozen=True)
class RuleUnit:
    """A fusion rule held back everywhere."""

    name: str
    kind: ClassVar[str] = "rule"

    def __str__(self) -> str:
        return f"rule:{self.name}"

    def describe(self) -> str:
        return f"rule {self.name} (everywhere)"


HoldUnit = FusionUnit | PassUnit | RuleUnit
"""What a run can be asked not to do (:attr:`OptimizeOptions.hold_back`). ``str()`` is the
form reports print (``fuse:RULE@ROOT``, ``pass:NAME``, ``rule:NAME``); ``describe()`` says it
in words."""


@dataclass
class OptimizeOptions:
    """Options of one optimization run.

    ``target`` is ``"cpu"``, ``"cuda"`` or ``None`` (probe the machine).
    ``only``/``disable`` switch fusion rules by family (``layer_norm``: both of its
    spellings' rules), or one rule by its own name (``layer_norm_op``); ``rules=False`` runs none
    (normalization alone, which then makes only bit-exact rewrites); ``fuse=False``
    rewrites nothing at all (import and export only). ``debug`` runs the IR
    verifier after every pass and makes rule bookkeeping errors fatal.

    Kernel selection: ``opset`` bounds the ONNX opset emitted kernels may need
    (None: the model's own — a model's opset is never converted);
    ``ort_version`` (``"1.20"``) the ONNX Runtime they must run on (None: the
    installed one); ``determinism`` ``"strict"`` admits only kernels with a
    fixed reduction order. ``tune`` times the legal kernels of each fused-op
    signature on this machine and stores the decisions in ``tune_cache``
    (None: ``~/.cache/onnxopt/tuning.json``); a ``tune_cache`` without ``tune``
    is only read.

    ``hold_back`` names what this run must not do, as the safeguard finds it
    (:mod:`onnxopt.safeguard`): a :class:`PassUnit` skips a normalization pass, a
    :class:`RuleUnit` a fusion rule, a :class:`FusionUnit` one fusion region (the
    rule at the node it ends at), each rule by its own name. ``extra_rules`` adds fusion rules of the
    caller's own (instances of :class:`onnxopt.rules.base.Rule`).
    """

    target: str | None = None
    only: frozenset[str] = field(default_factory=frozenset)
    disable: frozenset[str] = field(default_factory=frozenset)
    opset: int | None = None
    ort_version: str | None = None
    determinism: str = "relaxed"
    tune: bool = False
    tune_cache: str | None = None
    fuse: bool = True
    rules: bool = True  # False: normalization's exact rewrites only, nothing fused (--no-fuse)
    debug: bool = False
    hold_back: frozenset[HoldUnit] = field(default_factory=frozenset)
    extra_rules: tuple = ()  # Rule instances run after the built-in ones (plugins, tests)
    # The shapes kernel selection ranks (and --tune times) kernels at: regimes such as
    # "decode:batch=4,past=1024" (onnxopt.select.workload.parse_regime; none: a prefill, and a
    # decode step where the model has a key/value cache), and sizes pinned by --shape
    # (input name or dim name -> dims), ranked as one regime more.
    workload: tuple[str, ...] = ()
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def skips_pass(self, name: str) -> bool:
        return PassUnit(name) in self.hold_back

    def skips_region(self, rule: str, root: str) -> bool:
        return FusionUnit(rule, root) in self.hold_back or RuleUnit(rule) in self.hold_back
