"""A simulated accelerator: CPU tensors that behave like an accelerator's where it matters.

The GPU dry run (`SPECDEC_LAB_FORCE_GPU_PATHS=1`) takes the package's accelerator *branches* on
the CPU *device*, so it cannot tell where a tensor lives. Here a tensor on the stand-in device is
a `DeviceTensor`: a wrapper over a CPU tensor that reports `device="meta"`, so `device.type` is
not "cpu" and every accelerator branch runs, while the arithmetic is the CPU's, bit for bit.
While `Simulation.active()` is on:

- an op that mixes a host tensor (other than a 0-d scalar) with a device tensor raises, as
  "Expected all tensors to be on the same device" does on CUDA; host index tensors into a
  device tensor are allowed, as CUDA allows them, and counted as a blocking copy;
- a host `torch.Generator` that draws device tensors raises, as CUDA's does (and a device
  generator, `Simulation.generator`, drawing host tensors too);
- every device -> host read counts as a host sync (`.item`, `.tolist`, `.cpu`, `.numpy`, `bool`,
  `int`, `float`, `if tensor:`), and so does every blocking host -> device copy
  (`.to(device)` without `non_blocking=True`, `torch.tensor(..., device=...)`): on CUDA each
  one waits for the device's queue (an empty copy does not), `Simulation.syncs` counts them;
- factories called with the stand-in device (`torch.zeros(3, device=DEVICE)`) make device
  tensors; `Simulation.to_device(module)` moves a model's parameters and buffers.

`Simulation(flavour="mps")` stands in for Apple's MPS: a float64 tensor on the device raises,
as "the MPS framework doesn't support float64" does. Its device is still "meta" (a wrapper
reporting "mps" trips PyTorch's device guards on a build without MPS), so the one question the
package asks about MPS, `sampling.float64_on(device)`, is answered for it: False.

What it is not: nothing runs asynchronously, and there are no kernels; timings mean nothing.
`torch.inference_mode` runs as `no_grad` while the simulation is on (a wrapper subclass cannot be
an inference tensor). It changes nothing outside `active()`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from specdec_lab import env, sampling

DEVICE = torch.device("meta")
FLAVOURS = ("accelerator", "mps")
MPS_FLOAT64 = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
    "Please use float32 instead."
)
aten = torch.ops.aten
INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default}
HOST_READS = {"item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__"}


class DeviceTensor(torch.Tensor):
    """A tensor on the stand-in device: `elem` holds its values on the CPU."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> DeviceTensor:
        sim = Simulation.current
        if sim is not None and sim.flavour == "mps" and elem.dtype == torch.float64:
            raise TypeError(MPS_FLOAT64)
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            layout=elem.layout,
            device=DEVICE,
            requires_grad=elem.requires_grad,
        )
        out.elem = elem
        return out

    def __repr__(self) -> str:
        return f"DeviceTensor({self.elem!r})"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS and isinstance(args[0], DeviceTensor):  # a read on the host
            Simulation.current.count(name)
            return getattr(args[0].elem, name)(*args[1:], **(kwargs or {}))
        if name in ("__getitem__", "__setitem__") and isinstance(args[1], list):
            # C++ would build the index on the (data-less) meta device: build it on the host
            # instead, which the op then copies to the device, as CUDA does
            args = (args[0], torch.as_tensor(args[1], dtype=torch.long), *args[2:])
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError(f"{func} on a simulated device tensor outside Simulation.active()")


class DeviceGenerator(torch.Generator):
    """A generator that lives on the stand-in device (its numbers come from the CPU's)."""

    @property
    def device(self) -> torch.device:
        return DEVICE


def _on_device(flat: list) -> bool:
    return any(isinstance(x, DeviceTensor) for x in flat)


class _GeneratorCheck(TorchFunctionMode):
    """A generator draws tensors of its own device only (what CUDA's generators enforce)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        generator = kwargs.get("generator")
        if isinstance(generator, torch.Generator):
            flat, _ = tree_flatten((args, kwargs))
            device = kwargs.get("device")
            on_device = _on_device(flat) or (device is not None and torch.device(device) == DEVICE)
            if on_device != isinstance(generator, DeviceGenerator):
                where = DEVICE.type if on_device else "cpu"
                raise RuntimeError(
                    f"Expected a '{where}' device type for generator but found "
                    f"'{generator.device.type}'"
                )
        return func(*args, **kwargs)


class _DeviceOps(TorchDispatchMode):
    """Runs every op on the CPU values, enforcing one device per op and counting syncs."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        flat, _ = tree_flatten((args, kwargs))
        on_device = _on_device(flat)
        if func is aten._to_copy.default and "device" in kwargs:
            return self._copy(func, args[0], kwargs)
        if on_device and func in (aten._local_scalar_dense.default, aten.is_nonzero.default):
            self.sim.count(str(func))
        if on_device:
            host = [x for x in flat if type(x) is torch.Tensor and x.dim() > 0]
            if host and func in INDEXING and isinstance(args[0], DeviceTensor):
                self.sim.count(f"host indices copied to the device ({func})")  # CUDA allows it
                host = []
            if host:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two "
                    f"devices, {DEVICE.type} and cpu! ({func}, host shape {tuple(host[0].shape)})"
                )
        made_here = kwargs.get("device") == DEVICE
        if made_here:
            kwargs["device"] = torch.device("cpu")
        args, kwargs = tree_map(_values, (args, kwargs))
        out = func(*args, **kwargs)
        return tree_map(_wrap, out) if on_device or made_here else out

    def _copy(self, func, src: torch.Tensor, kwargs: dict):
        dst = torch.device(kwargs["device"])
        kwargs["device"] = torch.device("cpu")
        blocking = not kwargs.pop("non_blocking", False)
        if isinstance(src, DeviceTensor):
            out = func(src.elem, **kwargs)
            if dst.type == "cpu":
                self.sim.count("copy to the host")
                return out
            return DeviceTensor(out)
        out = func(src, **kwargs)
        if dst == DEVICE:
            if blocking and out.numel():
                self.sim.count("blocking copy to the device")
            return DeviceTensor(out)
        return out


def _values(x):
    return x.elem if isinstance(x, DeviceTensor) else x


def _wrap(x):
    is_plain = isinstance(x, torch.Tensor) and not isinstance(x, DeviceTensor)
    return DeviceTensor(x) if is_plain else x


class Simulation:
    """One simulated accelerator. `syncs` counts host syncs; `reasons` says what each was.

    flavour: "accelerator" (CUDA's rules) or "mps" (those, and no float64 on the device)."""

    current: Simulation | None = None

    def __init__(self, flavour: str = "accelerator") -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {FLAVOURS}, got {flavour!r}")
        self.flavour = flavour
        self.reasons: list[str] = []

    @property
    def syncs(self) -> int:
        return len(self.reasons)

    def count(self, reason: str) -> None:
        self.reasons.append(reason)

    def generator(self, seed: int = 0) -> DeviceGenerator:
        """A generator on the stand-in device, seeded with `seed`."""
        generator = DeviceGenerator()
        generator.manual_seed(seed)
        return generator

    def to_device(self, module: torch.nn.Module) -> torch.nn.Module:
        """Move `module`'s parameters and buffers to the stand-in device (tied weights stay
        tied). Returns the module."""
        previous, Simulation.current = Simulation.current, self  # this flavour's tensors
        try:
            self._move(module)
        finally:
            Simulation.current = previous
        return module

    def _move(self, module: torch.nn.Module) -> None:
        moved: dict[int, torch.nn.Parameter] = {}
        for sub in module.modules():
            for name, p in list(sub._parameters.items()):
                if p is not None and not isinstance(p, DeviceTensor):  # there already: stays
                    if id(p) not in moved:
                        moved[id(p)] = torch.nn.Parameter(DeviceTensor(p.data), requires_grad=False)
                    sub._parameters[name] = moved[id(p)]
            for name, b in list(sub._buffers.items()):
                if b is not None and not isinstance(b, DeviceTensor):
                    sub._buffers[name] = DeviceTensor(b)

    @contextlib.contextmanager
    def active(self) -> Iterator[Simulation]:
        previous, Simulation.current = Simulation.current, self
        real_tensor = torch.tensor
        real_generator, real_float64_on = env.generator, sampling.float64_on
        mode = torch.autograd.grad_mode.inference_mode
        real_enter, real_exit = mode.__enter__, mode.__exit__

        def tensor(data, *args, device=None, **kwargs):  # torch.tensor skips the dispatch mode
            out = real_tensor(data, *args, **kwargs)
            if device is not None and torch.device(device) == DEVICE:
                if out.numel():  # copying nothing waits for nothing
                    self.count("blocking copy to the device (torch.tensor)")
                return DeviceTensor(out)
            return out if device is None else out.to(device)

        def generator(device, seed):  # torch.Generator(device="meta") does not exist
            if torch.device(device) == DEVICE:
                return self.generator(seed)
            return real_generator(device, seed)

        def enter(ctx):  # inference mode as no_grad
            ctx.previous = torch.is_grad_enabled()
            torch.set_grad_enabled(False)

        def exit_(ctx, *exc):
            torch.set_grad_enabled(ctx.previous)

        def float64_on(device) -> bool:  # the package's one question about MPS
            if self.flavour == "mps" and torch.device(device) == DEVICE:
                return False
            return real_float64_on(device)

        torch.tensor, env.generator, sampling.float64_on = tensor, generator, float64_on
        mode.__enter__, mode.__exit__ = enter, exit_
        try:
            with _GeneratorCheck(), _DeviceOps(self):
                yield self
        finally:
            torch.tensor, env.generator = real_tensor, real_generator
            sampling.float64_on = real_float64_on
            mode.__enter__, mode.__exit__ = real_enter, real_exit
            Simulation.current = previous
