"""A short description of the machine a run was measured on."""

from __future__ import annotations

import os
import platform
import shutil
import sys
from importlib import metadata

__all__ = ["describe_machine"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gib() -> str:
    try:
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return "unknown memory"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min, when the run began)"


def describe_machine() -> dict[str, str]:
    """CPU, cores, memory, OS, load and the versions that matter for the figures."""
    return {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count() or "unknown"),
        "memory": _memory_gib(),
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "trio": _version("trio"),
        "trio_delegate": _version("trio-delegate"),
        "load average": _load(),
        "valgrind": "found" if shutil.which("valgrind") else "not found",
    }
