"""What a benchmark ran on: the figures are ratios, but a reader still needs the machine and versions."""

from __future__ import annotations

import datetime
import os
import platform

import torch

__all__ = ["machine_info"]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: str, dtype: torch.dtype) -> dict[str, object]:
    import transformers

    from .. import __version__

    info: dict[str, object] = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "platform": platform.platform(),
        "cpu": _cpu_name(),
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
