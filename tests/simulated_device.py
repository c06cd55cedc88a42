"""A simulated accelerator: CPU tensors that behave like an accelerator's where it matters.

The GPU dry run (`SPECDEC_LAB_FORCE_GPU_PATHS=1`) takes the package's accelerator *branches* on
the CPU *device*, so it cannot tell where a tensor lives. Here a tensor on the stand-in device is
a `DeviceTensor`: a wrapper over a CPU tensor that reports `device="sim"`, so `device.type` is
not "cpu" and every accelerator branch runs, while the arithmetic is the CPU's, bit for bit.
"sim" is PyTorch's PrivateUse1 backend under another name, with a stub device module and no
kernels of its own: every op on it runs here. It is not "meta", which transformers and the
package's memory guard use to build models without weights.
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
as "the MPS framework doesn't support float64" does. Its device is still "sim" (a wrapper
reporting "mps" trips PyTorch's device guards on a build without MPS), so the one question the
package asks about MPS, `sampling.float64_on(device)`, is answered for it: False.

What it is not: nothing runs asynchronously, and there are no kernels; timings mean nothing.
`torch.inference_mode` runs as `no_grad` while the simulation is on (a wrapper subclass cannot be
an inference tensor). It changes nothing outside `active()`.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode

from specdec_lab import env, sampling

NAME = "sim"


def _register_backend() -> torch.device:
    """Rename PrivateUse1 to "sim" (once per process) and give it a stub device module."""
    if torch._C._get_privateuse1_backend_name() != NAME:
        torch.utils.rename_privateuse1_backend(NAME)
    if not hasattr(torch, NAME):
        stub = types.ModuleType(f"torch.{NAME}")
        stub.is_available = lambda: True
        stub.is_initialized = lambda: True
        stub._lazy_init = lambda: None
        stub._is_in_bad_fork = lambda: False
        stub.device_count = lambda: 1
        stub.current_device = lambda: 0
        stub.manual_seed_all = lambda seed: None
        stub.synchronize = lambda device=None: None
        torch._register_device_module(NAME, stub)
    return torch.device(NAME)


DEVICE = _register_backend()
FLAVOURS = ("accelerator", "mps")
MPS_FLOAT64 = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
    "Please use float32 instead."
)
aten = torch.ops.aten
INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default}
NO_GUARD = f"PyTorch is not linked with support for {NAME} devices"
NO_KERNEL = f"with arguments from the '{NAME}' backend"
TRANSFERS = {torch.Tensor.to, torch.Tensor.cpu}
DATA = torch._C.TensorBase.__dict__["data"]  # the descriptor behind `t.data = new`
FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray}
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
        if name in ("__getitem__", "__setitem__") and isinstance(args[0], DeviceTensor):
            return _index(name, *args)
        if name == "__set__" and getattr(func, "__self__", None) is DATA:  # `t.data = new`,
            args[0].elem = _values(args[1])  # as nn.Module.to(dtype) converts its parameters
        try:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))
        except (RuntimeError, NotImplementedError) as e:
            if NO_GUARD not in str(e) and NO_KERNEL not in str(e):
                raise  # not C++ asking for the device's guard, or for a kernel of its own
        return _on_values(func, args, kwargs or {})

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if Simulation.current is None:
            raise RuntimeError(f"{func} on a simulated device tensor outside Simulation.active()")
        return _dispatch(Simulation.current, func, args, dict(kwargs or {}))


class DeviceGenerator(torch.Generator):
    """A generator that lives on the stand-in device (its numbers come from the CPU's)."""

    @property
    def device(self) -> torch.device:
        return DEVICE


def _is_sim(device) -> bool:
    """Whether `device` (a device, a string or None) is the stand-in device, any index."""
    return device is not None and torch.device(device).type == NAME


def _on_device(flat: list) -> bool:
    return any(isinstance(x, DeviceTensor) for x in flat)


class _DeviceFunctions(TorchFunctionMode):
    """Copies between the host and the device (PyTorch's C++ bindings for them guard the device
    first, and the stand-in device has no guard), and a generator draws tensors of its own device
    only (what CUDA's generators enforce)."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not kwargs and func not in TRANSFERS:  # most calls: nothing to decide here
            return func(*args)
        kwargs = kwargs or {}
        if func in TRANSFERS and args:
            options = {k: v for k, v in kwargs.items() if k != "copy"}  # _parse_to lacks it
            device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args[1:], **options)
            if func is torch.Tensor.cpu:
                device, dtype, non_blocking = torch.device("cpu"), None, False
            if isinstance(args[0], DeviceTensor) or _is_sim(device):
                return self._copy(args[0], device, dtype, non_blocking)
        if func in FROM_DATA and _is_sim(kwargs.get("device")):  # host data copied over
            out = func(*args, **(kwargs | {"device": torch.device("cpu")}))
            return self._copy(out, DEVICE, None, False)
        generator = kwargs.get("generator")
        flat, _ = tree_flatten((args, kwargs))
        made_here = _is_sim(kwargs.get("device")) and not _on_device(flat)
        if isinstance(generator, torch.Generator):
            on_device = made_here or _on_device(flat)
            if on_device != isinstance(generator, DeviceGenerator):
                where = DEVICE.type if on_device else "cpu"
                raise RuntimeError(
                    f"Expected a '{where}' device type for generator but found "
                    f"'{generator.device.type}'"
                )
        if made_here:  # a factory on the device: made on the host, then it is the device's
            return tree_map(_wrap, func(*args, **(kwargs | {"device": torch.device("cpu")})))
        return func(*args, **kwargs)

    def _copy(self, src, device, dtype, non_blocking):
        """`src.to(device, dtype)`: a copy to the host waits for the device; one to the device
        waits unless it is non-blocking (or empty)."""
        values = src.elem if isinstance(src, DeviceTensor) else src
        out = values.to(dtype=dtype) if dtype is not None else values
        if device is None:
            device = src.device
        if _is_sim(device):
            if not isinstance(src, DeviceTensor):
                if not non_blocking and out.numel():
                    self.sim.count("blocking copy to the device")
            elif out is values:
                return src  # already there, as it is: `to` returns the tensor itself
            return DeviceTensor(out)
        self.sim.count("copy to the host")
        return out.clone() if out is values else out


def _dispatch(sim: Simulation, func, args, kwargs: dict):
    """An op on device tensors, run on their CPU values: one device per op, syncs counted."""
    if func is aten._to_copy.default and "device" in kwargs:
        return _copy_op(sim, func, args[0], kwargs)
    if func in (aten._local_scalar_dense.default, aten.is_nonzero.default):
        sim.count(str(func))
    flat, _ = tree_flatten((args, kwargs))
    host = [x for x in flat if type(x) is torch.Tensor and x.dim() > 0]
    if host and func in INDEXING and isinstance(args[0], DeviceTensor):
        sim.count(f"host indices copied to the device ({func})")  # CUDA allows it
        host = []
    if host:
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two "
            f"devices, {DEVICE.type} and cpu! ({func}, host shape {tuple(host[0].shape)})"
        )
    if _is_sim(kwargs.get("device")):
        kwargs["device"] = torch.device("cpu")
    args, kwargs = tree_map(_values, (args, kwargs))
    return tree_map(_wrap, func(*args, **kwargs))


def _copy_op(sim: Simulation, func, src: torch.Tensor, kwargs: dict):
    dst = torch.device(kwargs["device"])
    kwargs["device"] = torch.device("cpu")
    kwargs.pop("non_blocking", None)
    out = func(src.elem, **kwargs)
    if dst.type == "cpu":
        sim.count("copy to the host")
        return out
    return DeviceTensor(out)


def _index(name: str, tensor: DeviceTensor, index, value=None):
    """`tensor[index]` and `tensor[index] = value`, on the values. (PyTorch's C++ indexing
    guards the device first, and the stand-in device has no guard.) A host index tensor is
    copied to the device, as CUDA does: counted as a blocking copy; so is a host value."""
    sim = Simulation.current
    flat, _ = tree_flatten(index if isinstance(index, tuple) else (index,))
    if any(isinstance(i, list) or (type(i) is torch.Tensor and i.dim() > 0) for i in flat):
        sim.count(f"host indices copied to the device ({name})")
    index = tree_map(_values, index)
    if isinstance(index, list):
        index = torch.as_tensor(index, dtype=torch.long)
    if name == "__getitem__":
        return _wrap(tensor.elem[index])
    if type(value) is torch.Tensor and value.numel() > 1:
        sim.count(f"blocking copy to the device ({name})")
    tensor.elem[index] = _values(value)
    return None


def _on_values(func, args, kwargs):
    """Run `func` on the values: for a binding or a composite op whose C++ code asks for the
    device's guard, or makes a tensor on the device without dispatching to Python (the stand-in
    has neither). The one-device rule is checked here instead."""
    flat, _ = tree_flatten((args, kwargs))
    host = [x for x in flat if type(x) is torch.Tensor and x.dim() > 0]
    if host:
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{NAME} and cpu! ({func.__name__}, host shape {tuple(host[0].shape)})"
        )
    args, kwargs = tree_map(_values, (args, kwargs))
    return tree_map(_wrap, func(*args, **kwargs))


def tree_flatten(tree) -> tuple[list, None]:
    """The leaves of nested tuples, lists and dicts (what op arguments are made of); a faster
    stand-in for torch.utils._pytree's, which would dominate the simulation's own cost."""
    leaves: list = []
    stack = [tree]
    while stack:
        x = stack.pop()
        if isinstance(x, (tuple, list)):
            stack.extend(x)
        elif type(x) is dict:
            stack.extend(x.values())
        else:
            leaves.append(x)
    return leaves, None


def tree_map(fn, tree):
    """`fn` applied to every leaf of nested tuples, lists and dicts, the structure kept."""
    kind = type(tree)
    if isinstance(tree, (tuple, list)):  # torch.return_types too: structseqs are tuples
        return kind([tree_map(fn, x) for x in tree])
    if kind is dict:
        return {k: tree_map(fn, v) for k, v in tree.items()}
    return fn(tree)


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
        real_generator, real_float64_on = env.generator, sampling.float64_on
        mode = torch.autograd.grad_mode.inference_mode
        real_enter, real_exit = mode.__enter__, mode.__exit__

        def generator(device, seed):  # torch.Generator(device="sim") does not exist
            if _is_sim(device):
                return self.generator(seed)
            return real_generator(device, seed)

        def enter(ctx):  # inference mode as no_grad
            ctx.previous = torch.is_grad_enabled()
            torch.set_grad_enabled(False)

        def exit_(ctx, *exc):
            torch.set_grad_enabled(ctx.previous)

        def float64_on(device) -> bool:  # the package's one question about MPS
            if self.flavour == "mps" and _is_sim(device):
                return False
            return real_float64_on(device)

        env.generator, sampling.float64_on = generator, float64_on
        mode.__enter__, mode.__exit__ = enter, exit_
        try:
            with _DeviceFunctions(self):
                yield self
        finally:
            env.generator = real_generator
            sampling.float64_on = real_float64_on
            mode.__enter__, mode.__exit__ = real_enter, real_exit
            Simulation.current = previous


def install(flavour: str = "accelerator") -> Simulation:
    """Put this whole process on the simulated accelerator (a notebook's kernel, a CLI run), for
    good: the stand-in device becomes `env.default_device()`, every model the package loads for
    it is loaded on the host and moved there (`Simulation.to_device`), and the sizes and the
    default dtype stay the CPU's (`env.dry_run()` is True, as in a GPU dry run; float32, since
    the simulation tests where tensors live and when the host waits, not half precision, which
    only a real device computes as it would). Returns the simulation, whose `syncs`
    keep counting."""
    from specdec_lab.models import pairs

    sim = Simulation(flavour)
    sim.installed = sim.active()  # held here: a dropped context would close, and restore all
    sim.installed.__enter__()  # never exited: the process stays on it
    load_model = pairs._load_model

    def load_on_the_host_then_move(source, device, dtype):
        model = load_model(source, torch.device("cpu"), dtype)
        return sim.to_device(model) if _is_sim(device) else model

    default_dtype = env.default_dtype
    env.default_device = lambda: DEVICE
    env.default_dtype = lambda device: torch.float32 if _is_sim(device) else default_dtype(device)
    env.dry_run = lambda device=None: True
    pairs._load_model = load_on_the_host_then_move
    return sim
