"""Metrics shared across granian's worker processes: each worker writes its counters and
histograms to memory-mapped files in one directory (prometheus-client's multiprocess
mode), named by its process id; whichever worker answers a scrape sums them, less the live
gauges of workers that are gone."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from prometheus_client import multiprocess, values

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_enabled() -> bool:
    """Whether this process writes its metrics to the shared directory."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


def write_to(path: str) -> None:
    """Have this process's metrics, from the next ones built on, kept in ``path`` (made if
    missing), summed with every other process's there."""
    Path(path).mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = path
    values.ValueClass = values.MultiProcessValue(process_identifier=_process_id)  # type: ignore[no-untyped-call]


_PID_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db$")


def forget_dead_workers(path: str) -> None:
    """Drop the live gauges of workers that are gone (a crashed worker's open streams)."""
    for name in glob.glob(os.path.join(path, "gauge_live*_*.db")):
        match = _PID_FILE.search(name)
        if match is None:
            continue
        pid = int(match.group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]
        except PermissionError:
            pass  # alive, owned by someone else


class _ProcessId:
    """This process's id, asked of the kernel once per process instead of on every metric
    update (prometheus-client checks it each time, to notice a fork): a fork updates it."""

    value = os.getpid()

    @classmethod
    def refresh(cls) -> None:
        cls.value = os.getpid()


os.register_at_fork(after_in_child=_ProcessId.refresh)


def _process_id() -> int:
    return _ProcessId.value
