"""torch calls a model makes that the TorchScript tracer or its ONNX exporter cannot take,
replaced while an export traces the model by calls that compute the same values:

* complex numbers (rotary embeddings written as `torch.polar`, `view_as_complex`, a complex
  product and `view_as_real`: DeepSeek-V2's, Llama 4's): ONNX has no complex arithmetic, so a
  complex tensor is carried as its real and imaginary parts, each a real tensor, and every
  operation on it is done on the parts (a product as (a+bi)(c+di) = (ac-bd) + (ad+bc)i);
* a Python bool written into a tensor as a fill value (`mask.scatter(-1, index, False)`: the
  sparse-attention indexers'): the tracer records it as a bool where the operator's schema
  wants a number and stops on an internal assert; the operator casts its value to its own
  dtype, so the int the bool equals writes the same element;
* an element repeated along one axis (`x.repeat_interleave(2, dim=-1)`: the interleaved rotary
  tables of Helium, GLM and Cohere): the exporter's composition leaves the result's rank
  wrong in its own shape inference, so a later product with a flattened tensor (their
  `rotate_half`) comes out a rank higher, and the cache's `cat` stops the export ("All tensors
  must have the same rank"); the same values are traced as an unsqueeze, an expand and a
  reshape.

Only calls that meet these are changed; every other call runs as the model makes it, and the
export's own check compares ONNX Runtime's output with the unchanged model's."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode


@contextlib.contextmanager
def replaced() -> Iterator[None]:
    """Inside the block, the calls above compute through real tensors and int fill values."""
    with _Replacing():
        yield


class ComplexUnsupported(TypeError):
    """A complex tensor met an operation that has no composition of real ones here."""


class _Replacing(TorchFunctionMode):
    def __torch_function__(self, func: Callable, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _MAKERS:
            return _MAKERS[func](*args, **kwargs)
        if func in _REPEATS:
            return _repeat_interleave(func, args, kwargs)
        if func in _FILL_VALUE:
            args, kwargs = _int_fill(_FILL_VALUE[func], args, kwargs)
        return func(*args, **kwargs)


# the operators that write a fill value cast to the dtype of the tensor they fill or copy:
# the value's position (self first) and keyword
_FILL_VALUE: dict[Callable, tuple[int, str]] = {
    **{f: (3, "value") for f in (torch.Tensor.scatter, torch.Tensor.scatter_, torch.scatter,
                                  torch.Tensor.index_fill, torch.Tensor.index_fill_,
                                  torch.index_fill)},
    **{f: (2, "value") for f in (torch.Tensor.masked_fill, torch.Tensor.masked_fill_,
                                  torch.masked_fill)},
    **{f: (1, "value") for f in (torch.Tensor.fill_, torch.fill)},
    torch.full_like: (1, "fill_value"),
    torch.Tensor.new_full: (2, "fill_value"),
}


_REPEATS = (torch.Tensor.repeat_interleave, torch.repeat_interleave)


def _repeat_interleave(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Each element of a tensor an int count of times along one of its axes, as an unsqueeze,
    an expand and a reshape; any other call (counts per element, no axis, an axis out of
    range) as it was made."""
    names = ("input", "repeats", "dim")
    given = {**dict(zip(names, args, strict=False)), **kwargs}
    x, repeats, dim = given.get("input"), given.get("repeats"), given.get("dim")
    if len(args) > 3 or set(given) - set(names) - {"output_size"} or \
            not isinstance(x, torch.Tensor) or x.dim() == 0 or type(repeats) is not int or \
            type(dim) is not int or not -x.dim() <= dim < x.dim():
        return func(*args, **kwargs)
    d = dim % x.dim()
    shape = list(x.shape)
    spread = x.unsqueeze(d + 1).expand(*shape[:d + 1], repeats, *shape[d + 1:])
    return spread.reshape(*shape[:d], shape[d] * repeats, *shape[d + 1:])


def _int_fill(where: tuple[int, str], args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    position, keyword = where
    if len(args) > position and isinstance(args[position], bool):
        args = (*args[:position], int(args[position]), *args[position + 1:])
    elif isinstance(kwargs.get(keyword), bool):
        kwargs = {**kwargs, keyword: int(kwargs[keyword])}
    return args, kwargs


class Complex:
    """A complex tensor as two real tensors of one shape: `real` and `imag`. torch functions
    given one reach `__torch_function__` (torch's protocol for tensor-like objects)."""

    def __init__(self, real: torch.Tensor, imag: torch.Tensor) -> None:
        self.real, self.imag = real, imag

    @property
    def shape(self) -> torch.Size:
        return self.real.shape

    @property
    def device(self) -> torch.device:
        return self.real.device

    @property
    def dtype(self) -> torch.dtype:
        return torch.complex128 if self.real.dtype == torch.float64 else torch.complex64

    @property
    def ndim(self) -> int:
        return self.real.ndim

    def dim(self) -> int:
        return self.real.dim()

    def size(self, *dim: int) -> Any:
        return self.real.size(*dim)

    def __getattr__(self, name: str) -> Any:
        # a shape operation moves both parts alike; any other is refused in one line
        if name in _SHAPE_METHODS:
            return lambda *a, **k: Complex(getattr(self.real, name)(*a, **k),
                                           getattr(self.imag, name)(*a, **k))
        raise AttributeError(_refusal(f"Tensor.{name}"))

    def to(self, *args: Any, **kwargs: Any) -> Complex:
        """Moved to a device; a complex dtype keeps the parts' precision."""
        args = tuple(_part_dtype(a) for a in args)
        kwargs = {k: _part_dtype(v) for k, v in kwargs.items()}
        return Complex(self.real.to(*args, **kwargs), self.imag.to(*args, **kwargs))

    def __getitem__(self, index: Any) -> Complex:
        return Complex(self.real[index], self.imag[index])

    def __mul__(self, other: Any) -> Complex:
        if isinstance(other, Complex):
            return Complex(self.real * other.real - self.imag * other.imag,
                           self.real * other.imag + self.imag * other.real)
        return Complex(self.real * other, self.imag * other)

    __rmul__ = __mul__

    def __add__(self, other: Any) -> Complex:
        if isinstance(other, Complex):
            return Complex(self.real + other.real, self.imag + other.imag)
        return Complex(self.real + other, self.imag)

    __radd__ = __add__

    def __neg__(self) -> Complex:
        return Complex(-self.real, -self.imag)

    def __sub__(self, other: Any) -> Complex:
        return self + (-other)

    def __rsub__(self, other: Any) -> Complex:
        return (-self) + other

    def conj(self) -> Complex:
        return Complex(self.real, -self.imag)

    @classmethod
    def __torch_function__(cls, func: Callable, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _FUNCTIONS:
            return _FUNCTIONS[func](*args, **kwargs)
        raise ComplexUnsupported(_refusal(getattr(func, "__name__", str(func))))


# methods that only move or repeat elements: the same call on each part
_SHAPE_METHODS = frozenset({
    "unsqueeze", "squeeze", "reshape", "view", "expand", "expand_as", "transpose", "permute",
    "contiguous", "flatten", "repeat", "repeat_interleave", "narrow", "select", "chunk",
    "split", "clone", "detach"})


def _refusal(name: str) -> str:
    return (f"{name} on a complex tensor has no composition of real operations for the "
            "TorchScript ONNX export; export=dynamo traces complex numbers its own way")


def _part_dtype(value: Any) -> Any:
    if value is torch.complex64:
        return torch.float32
    return torch.float64 if value is torch.complex128 else value


def _polar(abs: torch.Tensor, angle: torch.Tensor) -> Complex:
    return Complex(abs * torch.cos(angle), abs * torch.sin(angle))


def _view_as_complex(x: torch.Tensor) -> Complex:
    return Complex(x[..., 0], x[..., 1])


def _complex(real: torch.Tensor, imag: torch.Tensor) -> Complex:
    return Complex(real, imag)


def _view_as_real(z: Complex) -> torch.Tensor:
    return torch.stack([z.real, z.imag], dim=-1)


def _parts(values: Any, part: str) -> list[Any]:
    return [getattr(v, part) if isinstance(v, Complex) else
            (v if part == "real" else torch.zeros_like(v)) for v in values]


def _joined(join: Callable) -> Callable:
    def joined(values: Any, dim: int = 0) -> Complex:
        return Complex(join(_parts(values, "real"), dim), join(_parts(values, "imag"), dim))
    return joined


def _commuting(op: Callable) -> Callable:
    def commuting(a: Any, b: Any, **kwargs: Any) -> Complex:
        if kwargs:
            raise ComplexUnsupported(_refusal(f"{op.__name__} with {', '.join(kwargs)}"))
        return op(a, b) if isinstance(a, Complex) else op(b, a)
    return commuting


# the functions a model calls on a complex tensor, by the one torch dispatches
_MAKERS: dict[Callable, Callable] = {torch.polar: _polar, torch.view_as_complex: _view_as_complex,
                                     torch.complex: _complex}
_FUNCTIONS: dict[Callable, Callable] = {
    torch.view_as_real: _view_as_real,
    torch.real: lambda z: z.real,
    torch.imag: lambda z: z.imag,
    torch.conj: lambda z: z.conj(),
    torch.cat: _joined(torch.cat),
    torch.stack: _joined(torch.stack),
    **{f: _commuting(Complex.__mul__) for f in (torch.mul, torch.Tensor.mul, torch.Tensor.__mul__,
                                             torch.Tensor.__rmul__)},
    **{f: _commuting(Complex.__add__) for f in (torch.add, torch.Tensor.add, torch.Tensor.__add__,
                                             torch.Tensor.__radd__)},
}
