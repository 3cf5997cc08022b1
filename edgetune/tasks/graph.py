"""Graph preparation before tasks are extracted: the graph ONNX Runtime would run, in the layout chosen.

Every model format (ONNX, ``.pt2``, demos) goes through :func:`prepare_graph`
once, and the prepared module is what task extraction, the tuned and untuned
builds and ``edgetune deploy`` all compile, so tuned records always match
what is built.

At ``tuning.graph_optimization = "full"`` (the default) it does what ONNX
Runtime's default graph level does before a CPU run, with TVM's own Relax
machinery where it has it:

* ``fold-constants``: Relax's ``FoldConstant`` on the imported graph first, so
  that a dense layer's transposed weight and a reshaped bias are constants.
* ``fold-batch-norm``: an inference BatchNormalization after a convolution or
  a dense layer (with or without its bias) is folded into that layer's
  weights and bias, computed in numpy where the fold is exact. TVM's
  ``relax.transform.FoldBatchnormToConv2D`` covers only a bias-free conv and
  needs a ``FoldConstant`` afterwards that compiles every folded expression.
* ``decompose-batch-norm``: a batch norm left (one after a concat or an add)
  becomes the elementwise arithmetic it is (``DecomposeOpsForInference``), so
  ``FuseOps`` puts it into its producer's epilogue instead of tuning it as a
  kernel of its own that returns a tuple. Training-mode norms are kept.
* ``flatten-concat``: a concat of a concat along the same axis becomes one
  concat of all the pieces. Keras writes DenseNet's dense block as
  ``x = concat([x, new])``, layer after layer, so every layer copied the whole
  block so far into a new buffer, and that copy, read by both the next concat
  and the next layer's batch norm, fused with neither. Flattened, each layer
  reads the pieces where their convolutions wrote them, in one kernel with its
  batch norm and activation: the graph torchvision's DenseNet exports.
* ``fuse-transpose-matmul``: ``matmul(a, transpose(b))`` (attention's
  ``q @ k^T``) becomes one kernel that reads ``b`` transposed
  (``relax.transform.FuseTransposeMatmul``), one data-movement kernel less.
* ``fast-math``: float32 ``exp``, ``erf``, ``tanh``, softmax, sigmoid, SiLU and
  GELU computed by TVM's vectorizable polynomials (``topi.fast_exp``,
  ``fast_erf``, ``fast_tanh``, ``nn.fast_softmax``: the functions of Relax's
  ``FastMathTransform``, which covers the first four ops only). LLVM has no
  vector form of libm's ``expf``/``erff``: left as they are, every element is
  a scalar libm call, and a BERT-width GELU dense layer spent more time in
  ``erff`` than in its multiply-adds (whose cost also depends on the values, so
  tuning inputs mis-predicted it). ONNX Runtime's CPU kernels approximate these
  functions too (MLAS).

Before all of them, whatever ``optimization`` says, ``integer`` (``tuning.integer``, on by default) computes a
quantized model's convolutions and dense layers in integers: int8 operands, int32 accumulation, the
requantization fused as the epilogue (:mod:`edgetune.tasks.integer`); the quantized operators it leaves in float
are in :attr:`GraphReport.in_float`. It runs first because ``fold-constants`` would fold the int8 weights'
dequantize into float32 weights. A blocked ``conv_layout`` then leaves a model with int8 convolutions in the
layout it was imported in (the blocked computes are float32 ones), and the pass says so.

Convolution + bias + residual add + activation end up in one kernel through
``FuseOps``/``FuseTIR`` in :func:`~edgetune.tasks.models.prepare_for_tuning`.

``tuning.conv_layout`` then converts 2-D convolutions (``"auto"``, the default:
the layout measured best for the target's CPU family, :data:`CONV_LAYOUT_BY_FAMILY`) with Relax's
``ConvertLayout`` (weights are constants, so their transposes fold away).
``"NCHWc"`` is the blocked channel layout ONNX Runtime's x86 kernels use,
blocked by the target's float32 vector lanes (16 with AVX-512, 8 with AVX2, 4
otherwise; ``"NCHW8c"`` and the like fix the block, for channel counts the lanes
do not divide): ``NCHW16c`` data and ``OIHW16i16o`` weights, depthwise
convolutions and the ``Clip`` after them included (:mod:`edgetune.tasks.blocking`
says how, and lowers what Relax's ``LegalizeOps`` cannot), and a 3-channel stem
with its input in one block of 3; a convolution the blocked layout cannot
lower or has no tuned form for (channels that do not divide into blocks,
grouped convolutions other than depthwise) stays NCHW on its own,
between layout transforms, and :attr:`GraphReport.unblocked` says which and why. A blocked layout runs before ``fast-math`` (which
turns sigmoid into a ``call_tir`` the blocking cannot see through) and is
lowered after it, so EfficientNet's SiLU stays blocked and fuses into its
convolution.

A pass that fails on a model is skipped: the model keeps the graph from before
that pass, and :class:`GraphReport` (written to ``summary.json``) says which
pass was skipped and why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..common.choices import CONV_LAYOUTS, GRAPH_OPTIMIZATIONS
from ..common.cpu_family import family_of
from .fold import fold_constants

#: ``tuning.conv_layout = "auto"`` per CPU family: the layout measured better at equal trials per task
#: (benchmarks/RESULTS.md, ``layout_classes``: on AVX-512 blocked was faster in every class of convolution but
#: stride-1 3x3, a tie, on MobileNetV2 and ResNet-18; ``layout_classes_avx2``: on AVX2 the two models' kernels
#: at 12 trials per task were 0.70x blocked, ResNet-18 0.64x, MobileNetV2 1.09x, its depthwise ones slower
#: blocked); a family not measured (aarch64: only a board can time it) keeps the layout as imported
CONV_LAYOUT_BY_FAMILY: dict[str, str] = {"x86-64-avx512": "NCHWc", "x86-64-avx2": "NCHWc"}


def resolve_conv_layout(layout: str, target: Any) -> str:
    """``layout`` with ``"auto"`` resolved for ``target``'s CPU family (as imported without a target)."""
    if layout != "auto":
        return layout
    if target is None:
        return "as-is"
    return CONV_LAYOUT_BY_FAMILY.get(family_of(target).name, "as-is")


@dataclass
class GraphPass:
    """One preparation pass as it went on this model."""

    name: str
    status: str  # "applied", "unchanged" (nothing for it to do) or "skipped" (it failed; see detail)
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class GraphReport:
    """What :func:`prepare_graph` did to a model: the level, the layout and each pass."""

    optimization: str
    conv_layout: str
    passes: list[GraphPass] = field(default_factory=list)
    #: the convolutions a blocked layout left in NCHW, each with why (:class:`~edgetune.tasks.blocking.UnblockedConv`)
    unblocked: list[Any] = field(default_factory=list)
    #: the quantized operators the ``integer`` pass left in float, each with why (:class:`~edgetune.tasks.integer.FloatOp`)
    in_float: list[Any] = field(default_factory=list)

    @property
    def skipped(self) -> list[GraphPass]:
        return [p for p in self.passes if p.status == "skipped"]

    def describe(self) -> str:
        """One line for the terminal: what changed, and any pass skipped."""
        done = [f"{p.name} ({p.detail})" if p.detail else p.name for p in self.passes if p.status == "applied"]
        parts = [f"graph: {', '.join(done) if done else 'as imported'}"]
        parts += [f"{p.name} skipped: {p.detail}" for p in self.skipped]
        parts += [f"{p.name}: {p.detail}" for p in self.passes if p.status == "unchanged" and p.detail]
        if self.unblocked:
            reasons = sorted({conv.reason.split(":")[0] for conv in self.unblocked})
            parts.append(f"{len(self.unblocked)} convolution(s) left in NCHW ({', '.join(reasons)}; see summary.json)")
        return "; ".join(parts)  # the quantized operators left in float: in the integer pass's detail

    def to_dict(self) -> dict[str, Any]:
        return {
            "optimization": self.optimization,
            "conv_layout": self.conv_layout,
            "passes": [p.to_dict() for p in self.passes],
            "unblocked_convolutions": [conv.to_dict() for conv in self.unblocked],
            "quantized_ops_in_float": [op.to_dict() for op in self.in_float],
        }


def prepare_graph(
    model: Any, conv_layout: str = "auto", optimization: str = "full", target: Any = None, *, fast_math: bool = True,
    integer: bool = True, block_grouped: bool = True, winograd: bool | Sequence[str] = False,
) -> Any:
    """``model`` (a :class:`~edgetune.tasks.models.LoadedModel`) with its Relax module prepared; ``.graph`` says how.

    ``target`` (a TVM target) sizes the blocks of ``conv_layout = "NCHWc"``, which needs it, and resolves
    ``"auto"`` (as imported without one). ``fast_math=False`` leaves out the ``fast-math`` pass: the graph a
    history tuned before that pass existed was extracted from. ``integer=False`` (``tuning.integer = false``)
    leaves a quantized model in float between its dequantizes and quantizes, as the frontend imports it.
    ``block_grouped=False`` (``tuning.block_grouped = false``) leaves grouped convolutions in NCHW between layout
    transforms where a blocked layout could block them (:mod:`edgetune.tasks.blocking`). ``winograd=True``
    (``tuning.winograd = "on"``) computes blocked 3x3 stride-1 convolutions in the Winograd form
    (:mod:`edgetune.tasks.winograd`); a list of shape keys (what ``"auto"`` resolved to from the schedule library,
    :func:`~edgetune.tasks.recipe.recipe_from_settings`) only the convolutions of those shapes.
    """
    if conv_layout not in CONV_LAYOUTS:
        raise ValueError(f"conv_layout must be one of {', '.join(CONV_LAYOUTS)}, got {conv_layout!r} instead")
    conv_layout = resolve_conv_layout(conv_layout, target)
    if is_blocked(conv_layout) and target is None:
        raise ValueError(f"conv_layout {conv_layout!r} is lowered for the target's vectors: pass the target")
    if optimization not in GRAPH_OPTIMIZATIONS:
        raise ValueError(
            f"graph_optimization must be one of {', '.join(GRAPH_OPTIMIZATIONS)}, got {optimization!r} instead"
        )
    report = GraphReport(optimization, conv_layout)
    passes: list[tuple[str, Callable[[tvm.IRModule], tuple[tvm.IRModule, str]]]] = []
    if integer:
        passes.append(("integer", _integer_pass(report)))
    if optimization == "full":
        passes += [
            # first: a dense layer's transposed weight and a bias's reshape become the constants the fold needs
            ("fold-constants", _relax_pass(fold_constants())),
            ("fold-batch-norm", fold_batch_norms),
            ("decompose-batch-norm", _decompose_batch_norms),
            ("flatten-concat", flatten_concats),
            ("fuse-transpose-matmul", _fuse_transpose_matmul),
        ]
    if target is not None:
        # before any layout pass: int8 convolutions become the instruction's kernels, which no layout pass touches
        passes.append(("int8-kernels", _int8_kernels(target)))
    fast = [("fast-math", apply_fast_math)] if optimization == "full" and fast_math else []
    layout = f"layout-{conv_layout}"
    if is_blocked(conv_layout):
        # blocked first: it sees sigmoid and SiLU as Relax's elementwise ops and keeps them blocked, where fast-math's
        # call_tir would leave each in NCHW between two layout transforms (EfficientNet's SiLU after every conv)
        passes += [(layout, _block_channels(block_of(conv_layout, target), target, block_grouped)), *fast]
    elif conv_layout != "as-is":
        passes += [*fast, (layout, _convert_layout(conv_layout))]
    else:
        passes += fast
    mod = model.mod
    for name, apply in passes:
        if name == "int8-kernels" and not any(p.name == "integer" and p.status == "applied" for p in report.passes):
            continue  # no integer operators for the instruction: a float model's report stays what it was
        mod, entry = _run_pass(name, apply, mod)
        report.passes.append(entry)
    if is_blocked(conv_layout) and any(p.name == layout and p.status == "applied" for p in report.passes):
        from .blocking import lower_blocked, unblocked_convolutions

        report.unblocked = unblocked_convolutions(mod, block_of(conv_layout, target))
        try:
            with tvm.transform.PassContext(opt_level=3):
                mod = lower_blocked(mod, target, winograd=winograd if isinstance(winograd, bool) else frozenset(winograd))
        except Exception as exc:  # noqa: BLE001 - as a pass that fails: the graph without the layout, and why
            plain = prepare_graph(model, "as-is", optimization, target, fast_math=fast_math, integer=integer)
            report.passes = [*plain.graph.passes, GraphPass(layout, "skipped", f"lowering: {_first_line(exc)}")]
            return dataclasses.replace(plain, graph=report)
        entry = _winograd_entry(mod, winograd) if winograd else None
        if entry is not None:  # only where a convolution took the form: a recipe's passes are then as without it
            report.passes.append(entry)
    return dataclasses.replace(model, mod=mod, graph=report)


def _winograd_entry(mod: tvm.IRModule, winograd: bool | Sequence[str]) -> GraphPass | None:
    """How many convolutions the lowering put in the Winograd form, and why those (``tuning.winograd``)."""
    from .winograd import WINOGRAD_FUNC

    count = 0

    def visit(expr: Any) -> None:
        nonlocal count
        if (isinstance(expr, relax.Call) and expr.args and isinstance(expr.args[0], tvm.ir.GlobalVar)
                and expr.args[0].name_hint.startswith(WINOGRAD_FUNC)):
            count += 1

    for _gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    if not count:
        return None
    why = ("every 3x3 stride-1 convolution with enough channels and tiles" if winograd is True
           else f"the shapes whose library schedules beat the direct form's: {len(winograd)} in the library")
    return GraphPass("winograd", "applied", f"{count} 3x3 convolution(s) in the Winograd form F(4x4, 3x3) ({why})")


def _run_pass(
    name: str, apply: Callable[[tvm.IRModule], tuple[tvm.IRModule, str]], mod: tvm.IRModule
) -> tuple[tvm.IRModule, GraphPass]:
    """Apply one pass; on failure keep ``mod`` as it was and say why."""
    try:
        with tvm.transform.PassContext(opt_level=3):
            out, detail = apply(mod)
    except Exception as exc:  # noqa: BLE001 - TVM's passes raise anything on a graph they do not handle
        return mod, GraphPass(name, "skipped", _first_line(exc))
    if out.same_as(mod) or tvm_ffi.structural_equal(out, mod):
        return mod, GraphPass(name, "unchanged", detail)
    return out, GraphPass(name, "applied", detail)


def _integer_pass(report: GraphReport) -> Callable[[tvm.IRModule], tuple[tvm.IRModule, str]]:
    """The ``integer`` pass (:func:`~edgetune.tasks.integer.integer_arithmetic`); what it left in float goes on ``report``."""
    from .integer import integer_arithmetic, is_quantized

    def apply(mod: tvm.IRModule) -> tuple[tvm.IRModule, str]:
        if not is_quantized(mod):
            return mod, ""
        out, done = integer_arithmetic(mod)
        report.in_float = list(done.in_float)
        return out, done.detail()

    return apply


def _relax_pass(transform: Any) -> Callable[[tvm.IRModule], tuple[tvm.IRModule, str]]:
    def apply(mod: tvm.IRModule) -> tuple[tvm.IRModule, str]:
        return transform(mod), ""

    return apply


def _int8_kernels(target: Any) -> Callable[[tvm.IRModule], tuple[tvm.IRModule, str]]:
    def apply(mod: tvm.IRModule) -> tuple[tvm.IRModule, str]:
        from .int8 import int8_kernels

        return int8_kernels(mod, target)

    return apply


def _convert_layout(layout: str) -> Callable[[tvm.IRModule], tuple[tvm.IRModule, str]]:
    def apply(mod: tvm.IRModule) -> tuple[tvm.IRModule, str]:
        passes = [
            relax.transform.ConvertLayout({"relax.nn.conv2d": [layout, "OHWI"]}),
            relax.transform.Normalize(),
            fold_constants(),
        ]
        return tvm.transform.Sequential(passes)(mod), f"{_count_ops(mod, 'relax.nn.conv2d')} convolutions"

    return apply


def is_blocked(conv_layout: str) -> bool:
    """Whether ``conv_layout`` is a blocked channel layout: ``NCHWc`` or ``NCHW{b}c``."""
    return conv_layout.startswith("NCHW") and conv_layout.endswith("c")


def layout_name(conv_layout: str, target: Any) -> str:
    """The layout a profile's ``tuning.conv_layout`` tunes convolutions in, as a library names it (``NCHW16c``...)."""
    layout = resolve_conv_layout(conv_layout, target)
    if is_blocked(layout):
        return f"NCHW{block_of(layout, target)}c"
    return "NCHW (as imported)" if layout == "as-is" else layout


def block_of(conv_layout: str, target: Any) -> int:
    """Channels per block of a blocked layout: the target's vector lanes for ``NCHWc``, else the layout's own."""
    digits = conv_layout[len("NCHW"):-1]
    return int(digits) if digits else vector_lanes(target)


def vector_lanes(target: Any) -> int:
    """float32 lanes of the target's widest vector unit: 16 (AVX-512), 8 (AVX/AVX2) or 4 (NEON, SSE, unknown)."""
    from tvm.target import codegen

    try:
        features = {str(f) for f in codegen.llvm_get_cpu_features(target)}
    except Exception:  # noqa: BLE001 - an LLVM without this target's backend: assume the narrowest
        features = set()
    if "avx512f" in features:
        return 16
    if "avx2" in features or "avx" in features:
        return 8
    return 4


def _block_channels(block: int, target: Any, grouped: bool) -> Callable[[tvm.IRModule], tuple[tvm.IRModule, str]]:
    """Convolutions, depthwise ones included, to ``NCHW{block}c`` (:mod:`edgetune.tasks.blocking`; lowered after)."""
    from .blocking import block_channels

    def apply(mod: tvm.IRModule) -> tuple[tvm.IRModule, str]:
        return block_channels(mod, block, target, grouped=grouped)

    return apply


def flatten_concats(mod: tvm.IRModule) -> tuple[tvm.IRModule, str]:
    """``concat([concat([a, b]), c])`` as ``concat([a, b, c])`` along one axis; the inner concat stays where else read."""
    flattener = _ConcatFlattener(mod)
    out = tvm.IRModule(mod.functions, attrs=mod.attrs)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            out[gvar] = flattener.visit_expr(func)
    if not flattener.flattened:
        return mod, ""
    # an inner concat that only the outer one read is dead now
    return relax.transform.DeadCodeElimination()(out), f"{flattener.flattened} concats of a concat flattened"


_CONCAT = tvm.ir.Op.get("relax.concat")


@relax.expr_functor.mutator
class _ConcatFlattener(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.flattened = 0

    def visit_call_(self, original: relax.Call) -> relax.Expr:
        call = super().visit_call_(original)
        axis = _concat_axis(call)
        if axis is None:
            return call
        pieces: list[relax.Expr] = []
        nested = 0
        for piece in call.args[0].fields:
            bound = self.lookup_binding(piece) if isinstance(piece, relax.Var) else None
            if bound is not None and _concat_axis(bound) == axis:
                pieces.extend(bound.args[0].fields)  # already flattened: its binding is the visited call
                nested += 1
            else:
                pieces.append(piece)
        if not nested:
            return call
        self.flattened += nested
        return relax.op.concat(relax.Tuple(pieces), axis=axis)


def _concat_axis(expr: Any) -> int | None:
    """The non-negative axis of a ``concat`` of a literal tuple of tensors of known rank, else None."""
    if not (isinstance(expr, relax.Call) and expr.op.same_as(_CONCAT) and isinstance(expr.args[0], relax.Tuple)):
        return None
    fields = expr.args[0].fields
    ndims = {getattr(getattr(f, "ty", None), "ndim", -1) for f in fields}
    if not fields or len(ndims) != 1 or min(ndims) < 1 or expr.attrs.axis is None:
        return None
    return int(expr.attrs.axis) % ndims.pop()


def _fuse_transpose_matmul(mod: tvm.IRModule) -> tuple[tvm.IRModule, str]:
    """``matmul(a, transpose(b))`` (attention's ``q @ k^T``) as one kernel reading ``b`` transposed (TVM's own pass)."""
    from tvm.relax.transform.fuse_transpose_matmul import FuseTransposeMatmul

    before = _count_ops(mod, "relax.permute_dims")
    # the pattern's composite functions stay in the module, unused, until dead code is removed
    out = relax.transform.DeadCodeElimination()(FuseTransposeMatmul()(mod))
    fused = before - _count_ops(out, "relax.permute_dims")
    return (out, f"{fused} fused") if fused else (mod, "")


def _fast_math_ops() -> dict[str, Callable[[Any], Any]]:
    from tvm import topi

    def sigmoid(x: Any) -> Any:
        return topi.divide(1.0, topi.add(1.0, topi.fast_exp(topi.negative(x))))

    def gelu(x: Any) -> Any:  # as Relax legalizes nn.gelu: x * (0.5 + erf(x / sqrt 2) * 0.5)
        half = topi.multiply(topi.fast_erf(topi.multiply(x, 0.5**0.5)), 0.5)
        return topi.multiply(x, topi.add(0.5, half))

    def gelu_tanh(x: Any) -> Any:  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        cube = topi.multiply(x, topi.multiply(x, x))  # not power(): powf is a libm call per element too
        inner = topi.multiply(topi.add(x, topi.multiply(0.044715, cube)), (2 / np.pi) ** 0.5)
        return topi.multiply(topi.multiply(x, 0.5), topi.add(1.0, topi.fast_tanh(inner)))

    return {
        "relax.exp": topi.fast_exp,
        "relax.erf": topi.fast_erf,
        "relax.tanh": topi.fast_tanh,
        "relax.sigmoid": sigmoid,
        "relax.nn.silu": lambda x: topi.multiply(x, sigmoid(x)),
        "relax.nn.gelu": gelu,
        "relax.nn.gelu_tanh": gelu_tanh,
    }


@relax.expr_functor.mutator
class _FastMath(relax.PyExprMutator):
    """Relax's ``FastMathTransform`` with sigmoid, SiLU and GELU added, float32 only."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.ops = _fast_math_ops()
        self.replaced: dict[str, int] = {}

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        dtype = getattr(call.ty, "dtype", None)  # the call as imported: normalized, typed
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or dtype != "float32":
            return call
        name = call.op.name
        if name == "relax.nn.softmax":
            from tvm import topi

            out = self.builder_.call_te(topi.nn.fast_softmax, call.args[0], int(call.attrs.axis))
        elif name in self.ops:
            out = self.builder_.call_te(self.ops[name], call.args[0])
        else:
            return call
        self.replaced[name] = self.replaced.get(name, 0) + 1
        return out


def apply_fast_math(mod: tvm.IRModule) -> tuple[tvm.IRModule, str]:
    """Transcendental ops as TVM's vectorizable polynomials instead of scalar libm calls (see the module's doc)."""
    mutator = _FastMath(mod)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gvar, mutator.visit_expr(func))
    if not mutator.replaced:
        return mod, ""
    out = relax.transform.DeadCodeElimination()(mutator.builder_.get())
    done = ", ".join(sorted(f"{count} {name.rsplit('.', 1)[-1]}" for name, count in mutator.replaced.items()))
    return out, done


def _decompose_batch_norms(mod: tvm.IRModule) -> tuple[tvm.IRModule, str]:
    left = _count_ops(mod, "relax.nn.batch_norm")
    if not left:
        return mod, ""
    training = _count_ops(mod, "relax.nn.batch_norm", lambda call: bool(call.attrs.training))
    if training:
        # DecomposeOpsForInference would use the running statistics where a training-mode norm uses the batch's
        return mod, f"kept: {training} of {left} batch norms are in training mode"
    passes = [
        relax.transform.DecomposeOpsForInference(),
        # the decomposed norm still sits in a (value, mean, var) tuple, which FuseOps does not fuse across
        relax.transform.CanonicalizeBindings(),
        relax.transform.DeadCodeElimination(),
    ]
    return tvm.transform.Sequential(passes)(mod), f"{left} into elementwise arithmetic"


def fold_batch_norms(mod: tvm.IRModule) -> tuple[tvm.IRModule, str]:
    """Inference batch norms after a convolution or dense layer folded into its weights and bias.

    Matches ``batch_norm(conv2d(x, W) [+ b])[0]`` over the channels of an
    NCHW/OIHW convolution (grouped and depthwise included) and
    ``batch_norm(matmul(x, W) [+ b])[0]`` over the last axis of a dense layer
    with a 2-D constant weight. With ``s = gamma / sqrt(var + eps)`` the result
    is the layer with weights ``W * s`` (per output channel) plus one bias
    ``(b - mean) * s + beta``. Anything else is left for
    ``decompose-batch-norm``. Returns the module and how many were folded.
    """
    from tvm.relax.dpl import TupleGetItemPattern, is_const, is_op, rewrite_call, wildcard

    folded = 0

    def rule(layer_op: str, bias_side: str | None) -> tuple[Any, Callable[[relax.Expr, Any], relax.Expr]]:
        """One explicit pattern per layer and bias placement (alternatives in one pattern leave stale matches)."""
        data, weight = wildcard(), is_const()
        layer = is_op(layer_op)(data, weight)
        bias_const = is_const()
        bias = bias_const | is_op("relax.reshape")(bias_const, wildcard())
        # frontends write the bias on either side (ONNX: layer + b, PyTorch's linear: b + layer)
        before = {None: layer, "after": is_op("relax.add")(layer, bias), "before": is_op("relax.add")(bias, layer)}[bias_side]
        params = [is_const() for _ in range(4)]  # gamma, beta, mean, var
        norm = is_op("relax.nn.batch_norm")(before, *params)
        is_conv = layer_op == "relax.nn.conv2d"

        def fold(expr: relax.Expr, matches: Any) -> relax.Expr:
            nonlocal folded
            layer_call, attrs = matches[layer], matches[norm].attrs
            w = matches[weight].value.numpy()
            out_shape = [int(d) for d in layer_call.ty.shape]
            channels = out_shape[1] if is_conv else out_shape[-1]
            if bool(attrs.training) or not np.issubdtype(w.dtype, np.floating):
                return expr
            if is_conv:
                layouts = (layer_call.attrs.data_layout, layer_call.attrs.kernel_layout, layer_call.attrs.out_layout)
                if layouts != ("NCHW", "OIHW", "NCHW") or int(attrs.axis) != 1:
                    return expr
            elif w.ndim != 2 or int(attrs.axis) not in (-1, len(out_shape) - 1):
                return expr
            g, b, m, v = (matches[p].value.numpy().astype(np.float64) for p in params)
            g = g if attrs.scale else np.ones_like(g)
            b = b if attrs.center else np.zeros_like(b)
            layer_bias = np.zeros(channels)
            if bias_side is not None:
                add = matches[before]
                added = add.args[1] if bias_side == "after" else add.args[0]
                value = matches[bias_const].value.numpy().astype(np.float64)
                if value.size != channels or not _is_channel_vector([int(d) for d in added.ty.shape], is_conv):
                    return expr
                layer_bias = value.reshape(-1)
            scale = g / np.sqrt(v + float(attrs.epsilon))
            if is_conv:
                new_w = w * scale[:, None, None, None]
                shift = ((layer_bias - m) * scale + b).reshape(1, -1, 1, 1)
            else:
                new_w = w * scale[None, :]
                shift = (layer_bias - m) * scale + b
            folded += 1
            call = relax.Call(layer_call.op, [matches[data], relax.const(new_w.astype(w.dtype))], layer_call.attrs)
            return relax.op.add(call, relax.const(shift.astype(w.dtype)))

        return TupleGetItemPattern(norm, 0), fold

    rules = [rule(op, side) for op in ("relax.nn.conv2d", "relax.matmul") for side in ("after", "before", None)]
    out = mod.clone()
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            for pattern, fold in rules:
                func = rewrite_call(pattern, fold, func)
            out.update_func(gvar, func)
    if not folded:
        return mod, ""
    out = relax.transform.DeadCodeElimination()(out)
    return out, f"{folded} folded"


def _is_channel_vector(dims: list[int], is_conv: bool) -> bool:
    """The bias adds one value per output channel: shape (1, C, 1, 1) or (C, 1, 1) after a conv, (..., 1, C) after a dense."""
    if is_conv:
        return len(dims) in (3, 4) and dims[-2:] == [1, 1] and (len(dims) == 3 or dims[0] == 1)
    return all(d == 1 for d in dims[:-1])


def _count_ops(mod: tvm.IRModule, op_name: str, where: Callable[[relax.Call], bool] | None = None) -> int:
    count = 0

    def visit(expr: relax.Expr) -> None:
        nonlocal count
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and expr.op.name == op_name:
            count += 1 if where is None or where(expr) else 0

    for _gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return count


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
