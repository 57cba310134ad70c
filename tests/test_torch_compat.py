"""Every private torch name seqloader relies on (``seqloader.torch._compat.PRIVATE``) still exists
in the installed torch, and torch still words worker failures the way ``_compat`` parses them.

A torch upgrade that renames one of them fails here, naming it, instead of in a worker-death path
that only a crash exercises."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from seqloader.torch import _compat, receiving

MODULE_NAMES = [(w, n) for w, n, _ in _compat.PRIVATE if w not in ("DataLoader", "iterator")]
INSTANCE_NAMES = [(w, n) for w, n, _ in _compat.PRIVATE if w in ("DataLoader", "iterator")]


class Items(Dataset):
    """Item i is i; on item ``raise_at`` the worker raises, on ``sleep_at`` it sleeps a minute."""

    def __init__(self, n: int = 64, raise_at: int = -1, sleep_at: int = -1) -> None:
        self.n, self.raise_at, self.sleep_at = n, raise_at, sleep_at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.sleep_at:
            time.sleep(60)
        if i == self.raise_at:
            raise ValueError(f"item {i} is broken")
        return torch.tensor([i])


def _resolve(where: str) -> object:
    try:
        return importlib.import_module(where)
    except ImportError:
        module, _, attr = where.rpartition(".")
        return getattr(importlib.import_module(module), attr)


def test_every_private_name_has_a_reason() -> None:
    assert _compat.PRIVATE
    for where, name, why in _compat.PRIVATE:
        assert name.startswith("_") or name.isupper(), name
        assert len(why) > 20, f"{where}.{name}: say why it is needed"


@pytest.mark.parametrize(("where", "name"), MODULE_NAMES, ids=lambda x: x)
def test_private_module_name_exists(where: str, name: str) -> None:
    assert hasattr(_resolve(where), name), f"torch {torch.__version__} has no {where}.{name}"


def test_private_instance_names_exist_on_a_running_iterator() -> None:
    """Attributes set in torch's ``__init__`` exist on a live multi-worker iterator (ours, which
    also sets the pin-memory thread names torch's shutdown stops)."""
    dl = receiving.ReceivingDataLoaderBase(
        Items(), batch_size=None, num_workers=1, persistent_workers=True
    )
    it = iter(dl)
    try:
        assert isinstance(it, _MultiProcessingDataLoaderIter)
        assert int(next(it)) == 0
        owners = {"DataLoader": dl, "iterator": it}
        missing = [f"{w}.{n}" for w, n in INSTANCE_NAMES if not hasattr(owners[w], n)]
        assert not missing, f"torch {torch.__version__} lacks {missing}"
        assert _compat.current_iterator(dl) is it
        assert [w.pid for w in _compat.worker_processes(it)] == [it._workers[0].pid]
        assert _compat.workers_alive(dl)
        assert callable(signal.getsignal(signal.SIGCHLD))  # torch's handler, maybe wrapped
        _compat.unregister_worker_pids(it)
        assert it._worker_pids_set is False
        thread = it._pin_memory_thread
        assert thread.name == "seqloader-receive" and thread.is_alive()
    finally:
        _compat.shutdown_workers(dl)
    assert _compat.current_iterator(dl) is None
    # torch's shutdown joins the thread it knows as its pin-memory thread: it is over by now
    assert not thread.is_alive(), "torch's shutdown must stop the receiving thread"


def test_torch_shutdown_still_stops_a_thread_named_as_its_pin_memory_thread() -> None:
    source = inspect.getsource(_MultiProcessingDataLoaderIter._shutdown_workers)
    assert 'hasattr(self, "_pin_memory_thread")' in source
    assert "self._pin_memory_thread_done_event.set()" in source
    assert "self._pin_memory_thread.join()" in source


def test_profiler_flag_follows_a_profiling_session() -> None:
    assert torch.autograd.profiler._is_profiler_enabled is False
    with torch.autograd.profiler.profile():
        assert torch.autograd.profiler._is_profiler_enabled is True
    assert torch.autograd.profiler._is_profiler_enabled is False


def test_death_text_of_torch_status_check_parses() -> None:
    source = inspect.getsource(_MultiProcessingDataLoaderIter._try_get_data)
    assert 'f"DataLoader worker (pid(s) {pids_str}) exited unexpectedly"' in source
    assert _compat.parse_death(_compat.death_text([12, 345])) == ([12, 345], "exited unexpectedly")
    assert _compat.parse_death("a plain RuntimeError") is None


def test_death_text_of_torch_sigchld_handler_parses() -> None:
    """A worker killed while the main thread is busy: torch's SIGCHLD handler raises there."""
    dl = DataLoader(Items(), batch_size=None, num_workers=1, persistent_workers=True)
    it = iter(dl)
    next(it)
    pid = it._workers[0].pid
    try:
        with pytest.raises(RuntimeError) as info:
            os.kill(pid, signal.SIGKILL)
            while True:  # until the handler fires in here and raises (an event: no deadline)
                time.sleep(0.01)
    finally:
        _compat.shutdown_workers(dl)
    parsed = _compat.parse_death(str(info.value))
    assert parsed is not None, str(info.value)
    pids, what = parsed
    assert pids == [pid] and "Killed" in what, str(info.value)


def test_death_while_the_trainer_waits_in_next_parses() -> None:
    """A worker killed while building the batch ``next()`` waits for (not while sending, which
    shows as a broken pipe first): torch's error in ``next()`` names its pid."""
    dl = DataLoader(Items(sleep_at=2), batch_size=None, num_workers=1)
    it = iter(dl)
    pid = it._workers[0].pid
    killer = threading.Timer(1.0, os.kill, (pid, signal.SIGKILL))
    try:
        assert [int(next(it)) for _ in range(2)] == [0, 1]
        killer.start()
        with pytest.raises(RuntimeError) as info:
            next(it)  # item 2: the worker sleeps in it until killed
    finally:
        killer.cancel()
        _compat.shutdown_workers(dl)
    parsed = _compat.parse_death(str(info.value))
    assert parsed is not None and parsed[0] == [pid], str(info.value)


def test_worker_exception_text_parses() -> None:
    dl = DataLoader(Items(raise_at=0), batch_size=None, num_workers=1)
    try:
        with pytest.raises(ValueError) as info:
            next(iter(dl))
    finally:
        _compat.shutdown_workers(dl)
    assert _compat.parse_reraise(str(info.value)) == (0, "ValueError"), str(info.value)
    assert "item 0 is broken" in str(info.value)


# ---- nobody else touches torch's privates ----
PACKAGE = Path(__file__).resolve().parents[1] / "src" / "seqloader"
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
PRIVATE_NAMES = frozenset(name for _, name, _ in _compat.PRIVATE)


def private_touches(path: Path) -> list[str]:
    """Where ``path`` names a private of ``_compat.PRIVATE``: an attribute, a name, a method
    defined under that name (an override), a string (``getattr``), an import of it, or an import
    from a private torch module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = [node.name]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        elif isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            module = node.module or ""
            if module.split(".")[0] == "torch" and any(
                p.startswith("_") for p in module.split(".")
            ):
                found.append(f"{path.name}:{node.lineno}: imports from {module}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch" and any(
                    p.startswith("_") for p in a.name.split(".")
                ):
                    found.append(f"{path.name}:{node.lineno}: imports {a.name}")
        found += [f"{path.name}:{node.lineno}: {n}" for n in names if n in PRIVATE_NAMES]
    return found


def test_only_compat_touches_torch_privates() -> None:
    """Every private torch name is reached through ``_compat``: a module that names one itself
    would break on a torch upgrade without ``test_torch_compat`` knowing."""
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "_compat.py"]
    files += sorted(BENCHMARKS.rglob("*.py"))
    bad = [touch for p in files for touch in private_touches(p)]
    assert not bad, "torch privates outside seqloader/torch/_compat.py:\n" + "\n".join(bad)


def test_private_touches_finds_each_kind(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL\n"
        "x = it._send_idx\n"
        "getattr(it, '_workers')\n"
        "class I:\n"
        "    def _reset(self): ...\n"
    )
    touches = private_touches(probe)
    for expected in ("_utils", "MP_STATUS_CHECK_INTERVAL", "_send_idx", "_workers", "_reset"):
        assert any(expected in t for t in touches), (expected, touches)
