"""What the candidate's call did, recorded where the candidate cannot take it back.

Each observation (a PyTorch compute op, a host-side escape of tensor data, a thread, a frame walk, the audit
itself disturbed) is written at once, one line each, to a pipe whose read end only the parent holds: clearing
in-process state afterwards changes nothing, and a channel closed or replaced under the worker ends it (the
parent then has a dead worker, never a clean record). docs/threat-model.md ("Fallback detection on CPU") says
what this sees and what an in-process adversary can still do.
"""

from __future__ import annotations

import os
import sys
import threading

import _thread
from kernels_eval.harness.sanitize import clean

# Bound before the candidate is imported (and guarded), so rebinding os.write cannot silence the channel.
_os_write, _os_fstat, _getframe, _exit = os.write, os.fstat, sys._getframe, os._exit
_setprofile, _getprofile = sys.setprofile, sys.getprofile

# Tensor methods that hand the tensor's data to the host (profile c_call names, bound to a TensorBase/storage)
HOST_EXIT_METHODS = frozenset({"numpy", "tolist", "__dlpack__", "__array__"})
# Audit events that read interpreter state no kernel needs: walking to the evaluator's frames and objects.
FRAME_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "gc.get_objects", "gc.get_referrers",
                          "gc.get_referents", "sys.setprofile", "sys.settrace"})
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
FRAME_TOOLS = ("inspect.py", "traceback.py")  # stdlib frame helpers: their caller is the one walking
# torch._C entry points that take the audit's dispatch mode off the stack or change which keys dispatch
MODE_CALLS = frozenset({"_pop_torch_dispatch_stack", "_push_on_torch_dispatch_stack", "_set_dispatch_mode",
                        "_unset_dispatch_mode", "_get_dispatch_stack_at", "_len_torch_dispatch_stack",
                        "_get_dispatch_mode", "_dispatch_tls_set_dispatch_key_excluded",
                        "_dispatch_tls_set_dispatch_key_included", "_set_meta_in_tls_dispatch_include"})
ITEM_READS_LIMIT = 64  # element-wise .item() reads per call beyond which the host is computing


class Channel:
    """The write end of the observation pipe; every (kind, detail) is sent once per call."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.sent: set = set()
        self.records: list[str] = []  # in-process copy, for a worker run without a parent pipe (tests)
        self.ident = self._ident() if fd >= 0 else None

    def _ident(self):
        try:
            st = _os_fstat(self.fd)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def check(self) -> None:
        """End the worker if the channel's fd no longer refers to the parent's pipe (closed or dup2'ed over)."""
        if self.fd >= 0 and self._ident() != self.ident:
            _os_write(2, b"hotshape worker: the observation channel was closed or replaced by the submission\n")
            _exit(86)

    def send(self, kind: str, detail: str) -> None:
        key = (kind, detail)
        if key in self.sent:
            return
        self.sent.add(key)
        line = f"{kind}\t{detail}".replace("\n", " ")[:300]
        self.records.append(line)
        if self.fd >= 0:
            self.check()
            _os_write(self.fd, (line + "\n").encode(errors="replace"))


class Observer:
    """Watches one worker's calls: an audit hook (frame walks, ctypes, from the submission's own frames), a
    profile function on the calling thread (C calls that move tensor data to the host, outside kernel
    launches), the thread starter, and the dispatch mode's place on the stack."""

    def __init__(self, owned_file: str, channel: Channel) -> None:
        self.owned = os.path.realpath(owned_file)
        self.channel = channel
        self.active = False
        self.busy = False
        self.boundary: set = set()  # code objects where a walk outward stops (the launch wrapper, Worker.call)
        self.files: dict[str, bool] = {}
        self.item_reads = 0
        self.python_exits: set = set()

    # ---- installation (once, before the candidate is imported) ------------------------------------------

    def install(self) -> None:
        import torch

        self.python_exits = {torch.Tensor.__array__.__code__, torch.Tensor.__dlpack__.__code__}
        sys.addaudithook(self._audit)  # cannot be removed from Python
        start = _thread.start_new_thread
        observer = self

        def start_new_thread(function, args, kwargs=None):
            if observer.active:
                observer.channel.send("thread", f"a thread was started during the call ({_name(function)})")
            return start(function, args, {} if kwargs is None else kwargs)

        _thread.start_new_thread = start_new_thread
        threading._start_new_thread = start_new_thread

    # ---- per call ---------------------------------------------------------------------------------------

    def begin(self, profile: bool) -> None:
        self.channel.sent = set()
        self.item_reads = 0
        self.active = True
        if profile:
            _setprofile(self._profile)

    def end(self) -> None:
        _setprofile(None)
        self.active = False
        self.channel.check()

    def launching(self):
        """Suspend the profile function for a kernel launch (the interpreter's own host copies run there)."""
        previous = _getprofile()
        if previous is not None:
            _setprofile(None)
        return previous

    def launched(self, previous) -> None:
        if previous is not None and self.active:
            _setprofile(previous)

    # ---- the submission's frames ------------------------------------------------------------------------

    def _owned(self, filename: str) -> bool:
        known = self.files.get(filename)
        if known is None:
            known = self.files[filename] = os.path.realpath(filename) == self.owned
        return known

    def _direct_caller_owned(self, frame) -> bool:
        """The frame (skipping stdlib frame helpers) is the submission's."""
        depth = 0
        while frame is not None and depth < 8:
            code = frame.f_code
            if code in self.boundary:
                return False
            name = code.co_filename
            if self._owned(name):
                return True
            if not name.endswith(FRAME_TOOLS):
                return False
            frame, depth = frame.f_back, depth + 1
        return False

    def _audit(self, event: str, args) -> None:
        if not self.active or self.busy:
            return
        if event in FRAME_EVENTS:
            what = event
        elif event == "object.__getattr__" and len(args) > 1 and args[1] in FRAME_ATTRS:
            what = f"{type(args[0]).__name__}.{args[1]}"
        elif event.startswith("ctypes."):
            what = None
        elif event == "open" and args and "/mem" in str(args[0]) and "/proc/" in str(args[0]):
            what = None
        else:
            return
        self.busy = True
        try:
            if self._direct_caller_owned(_getframe(1)):
                if what is None:
                    self.channel.send("host", f"host compute: raw memory via {event}")
                else:
                    self.channel.send("tamper", f"the submission inspected the evaluator's frames or objects "
                                                f"({what}) during the call")
        finally:
            self.busy = False

    def _profile(self, frame, event: str, arg) -> None:
        if event == "c_call":
            name = getattr(arg, "__name__", None)
            if name in HOST_EXIT_METHODS or name == "item" or name == "from_address":
                self._host_exit(frame, name, arg)
            elif name in MODE_CALLS and self._owned(frame.f_code.co_filename):
                self.channel.send("tamper", f"the submission called torch._C.{name} (the audit's dispatch mode)")
        elif event == "call":
            code = frame.f_code
            caller = frame.f_back
            if caller is None or not self._owned(caller.f_code.co_filename) or self._owned(code.co_filename):
                return
            if code.co_filename.endswith("_python_dispatch.py"):
                self.channel.send("tamper", f"the submission called torch.utils._python_dispatch.{code.co_name} "
                                            f"(the audit's dispatch mode)")
            elif code in self.python_exits:
                self.channel.send("host", f"host compute: tensor data to the host via Tensor.{code.co_name}()")
            elif _is_host_library(code.co_filename):
                self.channel.send("host", f"host compute: {_library(code.co_filename)} ({code.co_name}) called "
                                          f"from the submission")

    def _host_exit(self, frame, name: str, arg) -> None:
        if not self._owned(frame.f_code.co_filename):
            return
        owner = getattr(arg, "__self__", None)
        kind = type(owner).__name__
        if name == "from_address":
            self.channel.send("host", f"host compute: raw memory via {kind}.from_address()")
        elif not _is_tensor_like(owner):
            return
        elif name == "item":
            self.item_reads += 1
            if self.item_reads > ITEM_READS_LIMIT:
                self.channel.send("host", f"host compute: element-wise Tensor.item() reads (over {ITEM_READS_LIMIT})")
        else:
            via = "numpy" if name in ("numpy", "__array__") else "DLPack" if name == "__dlpack__" else "Python lists"
            self.channel.send("host", f"host compute: {via} via {kind}.{name}()")

    # ---- the dispatch mode ------------------------------------------------------------------------------

    def mode_intact(self, mode, mode_class, depth_before: int) -> str | None:
        """None when `mode` is still the innermost dispatch mode, unchanged; else what changed."""
        import torch

        depth = torch._C._len_torch_dispatch_stack()
        if depth != depth_before + 1:
            return f"the dispatch-mode stack has {depth} modes, {depth_before + 1} expected"
        if torch._C._get_dispatch_stack_at(depth - 1) is not mode:
            return "the audit's dispatch mode was replaced on the stack"
        if type(mode) is not mode_class or "__torch_dispatch__" in vars(mode):
            return "the audit's dispatch mode object was altered"
        return None


def _name(function) -> str:
    return getattr(function, "__qualname__", None) or type(function).__name__


def _is_tensor_like(owner) -> bool:
    import torch

    return isinstance(owner, (torch._C.TensorBase, torch.UntypedStorage, torch.TypedStorage))


_HOST_LIBRARIES = ("numpy", "ctypes")


def _library(filename: str) -> str:
    parts = filename.replace("\\", "/").split("/")
    return next((p for p in reversed(parts) if p in _HOST_LIBRARIES), "?")


def _is_host_library(filename: str) -> bool:
    return any(f"/{lib}/" in filename for lib in _HOST_LIBRARIES)


def audit_mode_class(poison_ops: frozenset, allowed_ops: frozenset):
    """The dispatch mode the worker runs calls under (one class per worker, so its identity can be guarded)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Audit(TorchDispatchMode):
        """Counts dispatched ops (compute ops also go to the channel at once) and fills fresh allocations with
        NaN / a sentinel so unwritten output fails."""

        def __init__(self, channel: Channel, poison: bool) -> None:
            super().__init__()
            self.ops: dict[str, int] = {}
            self.channel, self.poison = channel, poison
            self.recorder = None  # discovery.Recorder of a recorded call: sees each op with its result

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if func.namespace != "aten":
                name = f"{func.namespace}::{name}"
            self.ops[name] = self.ops.get(name, 0) + 1
            if name not in allowed_ops:
                self.channel.send("op", name)
            out = func(*args, **(kwargs or {}))
            if self.poison and name in poison_ops and isinstance(out, torch.Tensor) and out.numel():
                if out.is_floating_point():
                    out.fill_(float("nan"))
                elif out.dtype != torch.bool and not out.is_complex():
                    out.fill_(torch.iinfo(out.dtype).min + 3 if out.dtype != torch.uint8 else 0xA5)
            if self.recorder is not None:
                self.recorder.op(name, args, kwargs or {}, out)
            return out

    return Audit


# The parent's reading of the channel is bounded: an honest call sends each (kind, detail) once, and a worker that
# writes forged lines straight to the pipe must not cost the evaluator more than linear time in what it kept
# (process.MAX_OBSERVED_BYTES caps the bytes of one call; once seen 50,000 lines cost 55 s of quadratic list scans).
MAX_RECORDS = 256  # distinct host / thread / tamper records kept per verdict; the rest are counted
DETAIL_CHARS = 300  # the worker's own cut of a line (Channel.send)


def parse_records(lines: list[str]) -> dict:
    """The parent's reading of one call's channel lines: {"op": {...}, "host": [...], "thread": [...],
    "tamper": [...]}; a line in no known form is itself a tamper record. Every text is cleaned
    (harness/sanitize.py) and each list holds at most MAX_RECORDS distinct entries, found with sets."""
    out: dict = {"op": {}, "host": Observed(), "thread": Observed(), "tamper": Observed()}
    for line in lines:
        kind, _, detail = line.partition("\t")
        if kind == "op" and detail:
            if detail in out["op"] or len(out["op"]) < MAX_RECORDS:
                out["op"][detail] = out["op"].get(detail, 0) + 1
            else:
                out["tamper"].add("the observation channel named over "
                                  f"{MAX_RECORDS} distinct PyTorch ops in one call: records forged")
        elif kind in ("host", "thread", "tamper") and detail:
            out[kind].add(detail)
        else:  # repr escapes what a terminal would act on; Observed caps how many are kept
            out["tamper"].add(f"unreadable observation record {line[:80]!r}")
    if len(out["op"]) and any(len(k) > DETAIL_CHARS for k in out["op"]):
        out["op"] = {clean(k, DETAIL_CHARS, lines=False): n for k, n in out["op"].items()}
    return out


class Observed(list):
    """Distinct observation texts in order of arrival, at most MAX_RECORDS of them (cleaned; a set finds repeats);
    the last entry says how many more distinct ones were dropped."""

    def __init__(self, items=()) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.dropped = 0
        for item in items:
            self.add(item)

    def add(self, text: str) -> None:
        if text in self.seen:
            return
        if len(self) < MAX_RECORDS:
            self.seen.add(text)
            super().append(clean(text, DETAIL_CHARS, lines=False))
        else:
            self.dropped += 1  # counted, not remembered: repeats past the cap count again

    def extend_unique(self, texts) -> None:
        for text in texts:
            self.add(text)

    def summary(self) -> list[str]:
        """The kept texts, plus one saying how many distinct ones were dropped."""
        return list(self) + ([f"… and {self.dropped} more records"] if self.dropped else [])
