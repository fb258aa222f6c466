"""The kernels that compute a remap's attention, and the list ``kernel="auto"`` tries in order.

Each kernel is one file with a subclass of :class:`~.base.Kernel`: its name (the value of the ``kernel`` option),
why it cannot run an input (:meth:`~.base.Kernel.refusal`), why auto passes it over (:meth:`~.base.Kernel.passed_over`)
and how it runs (:meth:`~.base.Kernel.run`). A new kernel is one file here and one entry of :data:`KERNELS`.

Asked for by name, a kernel that cannot run the input is refused with the reason; ``auto`` takes the first of
:data:`KERNELS` that can run it and is not passed over (the list runs from the fastest where it applies to the one
that runs everything).
"""

from __future__ import annotations

from .base import Kernel, RemapCall
from .cpu_fused import CpuFused
from .flex import Flex
from .materialised import Materialised

__all__ = ["AUTO", "KERNELS", "KERNEL_NAMES", "Kernel", "RemapCall", "choose_kernel"]

#: tried in this order by ``kernel="auto"``: the fused CPU kernel (CPU, no autograd), FlexAttention (CUDA), the
#: materialised scores (everything)
KERNELS: tuple[Kernel, ...] = (CpuFused(), Flex(), Materialised())
#: the ``kernel`` option's value that chooses per input
AUTO = "auto"
KERNEL_NAMES: tuple[str, ...] = tuple(k.name for k in KERNELS)
_BY_NAME = {k.name: k for k in KERNELS}


def choose_kernel(asked: str, call: RemapCall) -> Kernel:
    """The kernel that runs ``call``: ``asked`` by name (refused with the reason if it cannot), or for ``"auto"``
    the first of :data:`KERNELS` that can and is not passed over."""
    if asked != AUTO:
        kernel = _BY_NAME[asked]
        why = kernel.refusal(call)
        if why is not None:
            raise NotImplementedError(
                f"{call.st.plan.scheme}: kernel={asked!r} cannot run this attention: {why}. Patch with "
                f"kernel='auto' (the first of {', '.join(KERNEL_NAMES)} that can run it) or name another kernel")
        return kernel
    for kernel in KERNELS:
        if kernel.refusal(call) is None and kernel.passed_over(call) is None:
            return kernel
    return KERNELS[-1]
