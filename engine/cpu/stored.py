"""How a model's weights are held on this device (`hold_weights`: decided, converted, installed), and the quantized
and half-precision layers kept as stored on the CPU, multiplied by the compiled kernel (kernels/matmul.cpp).

The `weights_dtype` setting: "auto" leaves it to mlxchat, "keep" holds the weights as the model's files
have them, a float dtype converts every weight to it.

MLX's own CPU quantized matmul does not gain from batching (30 ms for one SmolLM2 layer at 8
rows, against 3 ms for float32 through the BLAS), which is why the engine used to widen every
weight to float32 at load. The kernel reads the 4- or 8-bit weights once per pass for all its
rows, widening them in cache: 1.0-1.2 ms for that layer at 8 rows (AMD EPYC, 2 cores), and a
model a sixth of the size in memory. A row's result is the same bits whatever rows share its pass.

The layers stay mlx-lm's classes' subclasses, holding the same arrays, so every family's own
code calls them unchanged.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Sequence

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from mlxchat.engine.cpu import kernels
from mlxchat.engine.devices import batching_note, device_kind

BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)
HALVES = (mx.float16, mx.bfloat16)
# Below this many multiply-adds a call runs on one thread: waking the others would cost more.
THREADED_WORK = 1 << 18


WEIGHTS_DTYPES = ("auto", "keep", "float32", "float16", "bfloat16")
INT8_REFUSED = ("int8_activations = true rounds the rows that 4- and 8-bit layers multiply, on a CPU where "
                "mlxchat's kernels run; this model has no such layers here (float weights, weights_dtype not "
                '"auto" or "keep", or another device): set int8_activations = false')

# What "auto" decides: the weights as the files have them ("keep"), every weight converted to a float dtype, or
# "kernels": the layers the compiled kernels multiply kept as stored, everything else float32.
Holding = Literal["keep", "kernels", "float32", "float16", "bfloat16"]


class WeightsRefused(ValueError):
    """The weights cannot be held as the settings ask; the message says what to change."""


@dataclass(frozen=True)
class HeldWeights:
    """How `hold_weights` left a model's weights: what doctor and F3 say of them."""

    dtype: str  # "float32", "float16", "bfloat16" or e.g. "q4 (group 32)"; ", int8 activations" where rounded
    kernel_matmuls: bool  # quantized or half layers are multiplied by the compiled kernels: batch-invariant, bits
    int8_activations: bool  # those layers multiply rows rounded to int8

    @property
    def batching_note(self) -> str:
        """Whether its batched replies, and its rows' logits, are the same as alone on this device, in words."""
        return batching_note(device_kind(), self.dtype, self.kernel_matmuls, self.int8_activations)


def hold_weights(model: nn.Module, weights_dtype: str, int8_activations: bool,
                 report: Callable[[str], None] = lambda _: None) -> HeldWeights:
    """Decides how `model`'s weights are held for `weights_dtype`, converts them (saying so through `report`) and
    installs the compiled kernels' layers where they run; WeightsRefused where the settings cannot be met."""
    if weights_dtype not in WEIGHTS_DTYPES:
        raise WeightsRefused(f"weights_dtype '{weights_dtype}' is not one of: {', '.join(WEIGHTS_DTYPES)}.")
    holding: Holding = auto_holding(model) if weights_dtype == "auto" else weights_dtype  # type: ignore[assignment]
    if holding not in ("keep", "kernels"):
        report(f"Converting weights to {holding}")
        convert(model, holding)
    # Where the compiled kernels run, quantized layers left as stored are multiplied by them (half-precision
    # ones too where "auto" keeps them).
    install(model, halves=holding == "kernels")
    if holding == "kernels":
        compute_in_float32(model)
    if int8_activations and not round_rows_to_int8(model):
        raise WeightsRefused(INT8_REFUSED)
    return HeldWeights(describe(model) + (", int8 activations" if int8_activations else ""),
                       holds_stored(model), int8_activations)


def auto_holding(model: nn.Module) -> Holding:
    """What "auto" does with `model`'s weights on this device.

    On a CPU, a quantized model keeps its 4- and 8-bit layers where the compiled kernels run and
    support them all (they gain from batching and read a sixth of float32's bytes), and a float16 or
    bfloat16 model its layers (half float32's bytes); otherwise the weights become float32, whose BLAS
    matmuls gain from batching where MLX's quantized and half-precision ones do not. Metal and CUDA
    keep the model as it is.
    """
    if device_kind() != "cpu":
        return "keep"
    if not kernels.status().active:
        return "float32"
    modules = [m for _, m in model.named_modules()]
    quantized = [m for m in modules if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))]
    if quantized:
        return "kernels" if all(supported(m) for m in quantized) else "float32"
    return "kernels" if any(type(m) is nn.Linear and supported_half(m) for m in modules) else "float32"


def convert(model: nn.Module, dtype: str) -> None:
    """Dequantizes every quantized layer and casts all float parameters to `dtype`, in place."""
    from mlx_lm.utils import dequantize_model

    # Scales and biases go to float32 first, so that dequantizing does not round in float16.
    model.set_dtype(mx.float32)
    dequantize_model(model)
    model.set_dtype(getattr(mx, dtype))
    mx.eval(model.parameters())


def describe(model: nn.Module) -> str:
    """What the weights are now: "q4 (group 32)" (or "q4/q8 ...") if any layer is quantized, else the float dtype."""
    quantized = [m for _, m in model.named_modules() if isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))]
    if quantized:
        bits = "/".join(f"q{b}" for b in sorted({m.bits for m in quantized}))
        groups = "/".join(str(g) for g in sorted({m.group_size for m in quantized}))
        return f"{bits} (group {groups})"
    by_dtype = Counter[str]()
    for _, p in tree_flatten(model.parameters()):
        by_dtype[str(p.dtype).rsplit(".", 1)[-1]] += p.nbytes
    return by_dtype.most_common(1)[0][0]


def supported(module: Any) -> bool:
    """Whether the kernel multiplies by this quantized layer's weights as they are."""
    return (
        isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding))
        and module.mode == "affine"
        and module.bits in BITS
        and module.group_size in GROUP_SIZES
        and module.get("biases") is not None
    )


def supported_half(module: Any) -> bool:
    """Whether the kernel multiplies by this float16 or bfloat16 layer's weight as it is."""
    return (
        isinstance(module, (nn.Linear, nn.Embedding))
        and module["weight"].dtype in HALVES
        and module["weight"].shape[-1] % 8 == 0
    )


class Call:
    """One call of the kernel over fixed layers, its arguments gathered once (a decode step makes over a
    hundred calls: their Python cost counts). Gives x @ W.T for each layer's weight, or with `swiglu`
    (gate, up) one output, silu(x @ gate.T) * (x @ up.T); layers' biases are added."""

    def __init__(self, layers: Sequence[Any], swiglu: bool = False) -> None:
        first = layers[0]
        if _is_quantized(first):
            self._arrays = [a for layer in layers for a in (layer["weight"], layer["scales"], layer["biases"])]
            self._format = (first.bits, first.group_size, swiglu)
        else:  # float16 or bfloat16: the weights alone, "16 bits"
            self._arrays = [layer["weight"] for layer in layers]
            self._format = (16, 0, swiglu)
        self._columns = sum(layer["weight"].shape[0] for layer in layers)
        self._biases = [None] if swiglu else [layer.get("bias") for layer in layers]
        self._first = first  # whose int8_rows says how its rows are multiplied, call by call

    def holds(self, layer: Any) -> bool:
        """Whether this call (of one layer) still holds `layer`'s current arrays."""
        now = [layer["weight"], layer["scales"], layer["biases"]] if _is_quantized(layer) else [layer["weight"]]
        return all(a is b for a, b in zip([*self._arrays, self._biases[0]], [*now, layer.get("bias")]))

    def rows(self, x: mx.array) -> list[mx.array]:
        """For float32 rows x (M, K), or heads (M, heads, 1, dim) as rows: the outputs (M, N)."""
        outs = kernels.status().module.weights_matmul(x, self._arrays, *self._format, *self._how(x))
        return [out if bias is None else out + bias for out, bias in zip(outs, self._biases)]

    def bare(self) -> bool:
        """Whether its products are the outputs as they are (no bias added, no SwiGLU): what rows_rope takes."""
        return all(bias is None for bias in self._biases) and not self._format[2]

    def rows_rope(self, x: mx.array, batch: int, head_dim: int, rotated: int, offsets: mx.array,
                  rope: tuple[mx.array, bool, float]) -> list[mx.array]:
        """For float32 rows x (batch * L, K): each output as heads (batch, N / head_dim, L, head_dim), the first
        `rotated` turned by RoPE (`rope`: inverse frequencies, traditional, scale; sequence b from offsets[b]), one
        operation: a layer's q, k and v and their RoPE (where bare())."""
        outs: list[mx.array] = kernels.status().module.weights_matmul_rope(
            x, self._arrays, *self._format[:2], *self._how(x), batch, head_dim, rotated, offsets, *rope
        )
        return outs

    def stack_arrays(self) -> list[mx.array] | None:
        """Its weights' arrays as the layer stack takes a call (engine.cpu.layer_stack); None where the call adds
        biases."""
        return None if any(bias is not None for bias in self._biases) else self._arrays

    def stack_format(self) -> list[int]:
        """(bits, group size) of the call as the layer stack takes it."""
        return [self._format[0], self._format[1]]

    @property
    def int8(self) -> int:
        """Whether the call's rows are now rounded to int8 (the kernel's int8)."""
        return int(self._first.int8_rows)

    def _how(self, x: mx.array) -> tuple[int, int]:
        """(threads, int8) for a call over rows x."""
        work = x.size * self._columns
        return kernels.THREADS if work >= THREADED_WORK else 1, self.int8

    def __call__(self, x: mx.array) -> list[mx.array]:
        """For x of any shape (..., K) and dtype: the outputs, of x's shape and dtype but the last axis."""
        outs = self.rows(x.reshape(-1, x.shape[-1]).astype(mx.float32))
        return [out.astype(x.dtype).reshape(*x.shape[:-1], out.shape[-1]) for out in outs]


def fusable(layers: Sequence[Any]) -> bool:
    """Whether these layers can share one call: all supported, alike in format."""
    first = layers[0]
    if not _is_quantized(first):
        return all(supported_half(layer) and layer["weight"].dtype == first["weight"].dtype for layer in layers)
    return all(
        supported(layer)
        and layer.bits == first.bits
        and layer.group_size == first.group_size
        and layer["scales"].dtype == first["scales"].dtype
        for layer in layers
    )


def _is_quantized(layer: Any) -> bool:
    return isinstance(layer, (nn.QuantizedLinear, nn.QuantizedEmbedding))


class _Kernel:
    """What a layer multiplied by the compiled kernel has: its own Call, made again whenever its arrays were
    replaced (e.g. cast to float32)."""

    # Whether its rows are rounded to int8 before the product (quantized layers, `round_rows_to_int8`).
    int8_rows = False

    @property
    def call(self) -> Call:
        call = self.__dict__.get("_call")
        if call is None or not call.holds(self):
            call = self.__dict__["_call"] = Call([self])
        return call


class _KernelLinear(_Kernel):
    def __call__(self, x: mx.array) -> mx.array:
        return self.call(x)[0]


class _KernelEmbedding(_Kernel):
    # The dtype its rows are widened to; None: as the model's own class gives them.
    widen_to: mx.Dtype | None = None

    def as_linear(self, x: mx.array) -> mx.array:
        """The tied head's logits."""
        return self.call(x)[0]


class StoredLinear(_KernelLinear, nn.QuantizedLinear):
    """mlx-lm's QuantizedLinear, multiplied by the compiled kernel."""


class StoredHalfLinear(_KernelLinear, nn.Linear):
    """A float16 or bfloat16 Linear, multiplied by the compiled kernel."""


class StoredEmbedding(_KernelEmbedding, nn.QuantizedEmbedding):
    """mlx-lm's QuantizedEmbedding, whose tied head (`as_linear`) the compiled kernel multiplies by."""

    def __call__(self, x: mx.array) -> mx.array:
        if self.widen_to is None:
            return super().__call__(x)
        # Scales and biases widened before, not after: the rows then equal float32 dequantizing exactly.
        return mx.dequantize(self["weight"][x], self["scales"][x].astype(self.widen_to),
                             self["biases"][x].astype(self.widen_to), self.group_size, self.bits)


class StoredHalfEmbedding(_KernelEmbedding, nn.Embedding):
    """A float16 or bfloat16 Embedding, whose tied head the compiled kernel multiplies by."""

    def __call__(self, x: mx.array) -> mx.array:
        rows = super().__call__(x)
        return rows if self.widen_to is None else rows.astype(self.widen_to)


# Every layer class `install` puts in.
STORED_TYPES = (StoredLinear, StoredHalfLinear, StoredEmbedding, StoredHalfEmbedding)


def _adopt(module: nn.Module, cls: type) -> nn.Module:
    """A `cls` holding `module`'s arrays and settings, without copying or quantizing anything."""
    new = cls.__new__(cls)
    nn.Module.__init__(new)
    for name, value in module.parameters().items():
        setattr(new, name, value)
    for name in ("group_size", "bits", "mode", "num_embeddings", "dims"):
        if hasattr(module, name):
            setattr(new, name, getattr(module, name))
    new.freeze()
    return new


def install(model: nn.Module, halves: bool = False) -> int:
    """Swaps every quantized layer the kernel supports for its kernel-backed twin, when the kernels run on
    this CPU, and with `halves` every float16 or bfloat16 one too; returns how many were swapped."""
    if not kernels.active_here():
        return 0
    twins = {nn.QuantizedLinear: StoredLinear, nn.QuantizedEmbedding: StoredEmbedding}
    half_twins = {nn.Linear: StoredHalfLinear, nn.Embedding: StoredHalfEmbedding} if halves else {}
    swaps = []
    for name, module in model.named_modules():
        if type(module) in twins and supported(module):
            swaps.append((name, _adopt(module, twins[type(module)])))
        elif type(module) in half_twins and supported_half(module):
            swaps.append((name, _adopt(module, half_twins[type(module)])))
    model.update_modules(tree_unflatten(swaps))
    return len(swaps)


def compute_in_float32(model: nn.Module) -> None:
    """Makes a model whose layers `install` swapped compute in float32: every other float array (norms,
    biases of layers) becomes float32 and embeddings widen their rows to it. What the kernel reads stays as
    stored: half-precision weights, and the scales and biases of quantized ones, which it widens exactly
    (they are a fifth of the bytes it reads at group 32, 4 bits, float16 scales)."""
    kept = {
        name: ("scales", "biases") if isinstance(m, (StoredLinear, StoredEmbedding)) else ("weight",)
        for name, m in model.named_modules()
        if isinstance(m, STORED_TYPES)
    }
    updates = [
        (name, value.astype(mx.float32))
        for name, value in tree_flatten(model.parameters())
        if mx.issubdtype(value.dtype, mx.floating)
        and name.rpartition(".")[2] not in kept.get(name.rpartition(".")[0], ())
    ]
    model.update(tree_unflatten(updates))
    for _, module in model.named_modules():
        if isinstance(module, _KernelEmbedding):
            module.widen_to = mx.float32
    mx.eval(model.parameters())


def round_rows_to_int8(model: nn.Module) -> int:
    """Has every quantized layer `install` swapped multiply its rows rounded to int8 in blocks of 32 (the
    `int8_activations` setting): faster, and no longer the float32 product. Returns how many layers do."""
    layers = [m for _, m in model.named_modules() if isinstance(m, (StoredLinear, StoredEmbedding))]
    for layer in layers:
        layer.int8_rows = True
    return len(layers)


@contextmanager
def float_rows(model: nn.Module) -> Iterator[None]:
    """Within it, every layer multiplies its rows as float32 (the load's batch check: int8 rows turn the last bits
    of two float paths into different integers, so they would hide whether the slots serve the model as it is)."""
    rounded = [m for _, m in model.named_modules() if isinstance(m, _Kernel) and m.int8_rows]
    for layer in rounded:
        layer.int8_rows = False
    try:
        yield
    finally:
        for layer in rounded:
            layer.int8_rows = True


def holds_stored(model: nn.Module) -> bool:
    """Whether `install` swapped any of `model`'s layers."""
    return any(isinstance(m, STORED_TYPES) for _, m in model.named_modules())
