"""The training-free remaps of a model's own rotary positions, as one plug-in: Self-Extend, ReRoPE, dual chunk
attention, STRING and Self-Extend over units of meaning.

- ``scheme.py``: what they share (:class:`~.scheme.RemapScheme`: regions of query-key pairs, each with its own
  rotation positions; the shared options), and ``checks.py``: what a model must offer them;
- one file per method, registered as it is imported below (a new method: one file and one name in that line);
- ``attention.py``: the attention function they run inside, which hands each call to a kernel;
- ``kernels/``: one file per kernel and the list ``kernel="auto"`` tries (a new kernel: one file and one entry);
- ``keys.py``: the rotation tables of a forward and the keys rotated into the KV cache; ``units.py``: the units
  of meaning Self-Extend over units groups by.

The engine (plan, state, attention functions) imports none of this: it knows "remap" only as a kind of contribution
(what a scheme contributes decides where it enters the model) and asks the scheme (``Scheme.attends``,
``Scheme.attend``, ``Scheme.rotate_new_keys``, ``Scheme.read_units`` and the model checks).
"""

from . import self_extend, rerope, string, dca, self_extend_units  # noqa: F401, I001  (registers them, in this order)
from .kernels import KERNEL_NAMES, KERNELS
from .scheme import RemapScheme

__all__ = ["KERNELS", "KERNEL_NAMES", "RemapScheme"]
