"""What a benchmark ran on: the figures are ratios, but a reader still needs the machine and versions."""

from __future__ import annotations

import datetime
import os
import platform

import torch

__all__ = ["BFLOAT16_FLAGS", "cpu_bfloat16_units", "machine_info"]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: CPU flags of bfloat16 arithmetic units (Linux ``/proc/cpuinfo``): without them bfloat16 is emulated, several
#: times slower than float32 (hf_trajpe.precision measures it), so a bfloat16 run means something else there
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bfloat16_units() -> dict[str, object] | None:
    """``{"units": whether any, <flag>: present}`` for :data:`BFLOAT16_FLAGS`; ``None`` where the CPU's flags
    cannot be read (not Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        return None
    if flags is None:
        return None
    present = {name: name in flags for name in BFLOAT16_FLAGS}
    return {"units": any(present.values()), **present}


def machine_info(device: str, dtype: torch.dtype) -> dict[str, object]:
    import transformers

    from .. import __version__

    info: dict[str, object] = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpu_bfloat16": cpu_bfloat16_units(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "hf_trajpe": __version__,
        "device": device,
        "dtype": str(dtype).replace("torch.", ""),
    }
    if torch.device(device).type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    try:
        info["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    return info
