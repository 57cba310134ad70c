"""What the numbers were measured on: they mean little without it."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def describe_machine() -> dict:
    import torch

    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_gib": _mem_total_gib(),
        "python": platform.python_version(),
        "torch_threads": torch.get_num_threads(),
        "versions": {
            d: _version(d) for d in ("seqloader", "torch", "numpy", "h5py", "returnn", "psutil")
        },
    }
