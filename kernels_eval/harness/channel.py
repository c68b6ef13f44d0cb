"""Parent ⇄ worker messages (length-prefixed JSON over pipes) and tensor transport (raw files, or CUDA IPC).

Nothing here unpickles data from the worker: a tensor travels as a file of its bytes (C order) plus its dtype
and shape, which the parent checks against the file's size before reading it, or, unsandboxed on a GPU, as an
IPC handle whose fields are validated before the parent opens them.
"""

from __future__ import annotations

import base64
import json
import math
import mmap
import os
import struct
import threading
from kernels_eval.harness import safe_io

MAX_MESSAGE_BYTES = 64 << 20
STAGING_BYTES = 64 << 20  # pinned host buffer a CUDA tensor is copied through, a chunk at a time
# A chunk is read from its file by this many threads at once: one thread's read of a tmpfs file runs at ~1.5 GB/s
# (seen on H200's host: 8-10 s per side for a 4 GiB output judged a few times), reads of one file do not
# serialise on its inode as writes do, and each os.preadv releases the GIL.
READ_THREADS = max(1, min(4, os.cpu_count() or 1))


def send(fd: int, message: dict) -> None:
    """Write one message to a pipe."""
    data = json.dumps(message, allow_nan=True).encode()
    os.write(fd, struct.pack("<Q", len(data)))
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None = None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            import select
            import time

            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError("the reply did not arrive whole before the deadline")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("worker closed its result pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(fd: int, deadline: float | None = None) -> dict:
    """Read one message from a pipe (blocking; TimeoutError past `deadline`, a time.monotonic() value); ValueError
    when it is not a JSON object."""
    (n,) = struct.unpack("<Q", _read_exact(fd, 8, deadline))
    if n > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {n} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
    message = json.loads(_read_exact(fd, n, deadline))
    if not isinstance(message, dict):
        raise ValueError("message is not a JSON object")
    return message


# ---- tensors -------------------------------------------------------------------------------------------


class Staging:
    """A pinned host buffer that CUDA tensors cross the host through, a chunk at a time, reused between
    transfers (allocated on the first one: pinning is slow, and fresh host pages fault on first touch)."""

    def __init__(self, nbytes: int = STAGING_BYTES) -> None:
        self.nbytes, self.buf, self.view = nbytes, None, None

    def _pinned(self):
        import torch

        if self.buf is None:
            self.buf = torch.empty(self.nbytes, dtype=torch.uint8, pin_memory=True)
            self.view = memoryview(self.buf.numpy())
        return self.buf, self.view

    def chunks(self, flat):
        """memoryviews of successive pinned copies of the uint8 CUDA tensor `flat`, each valid until the next."""
        buf, view = self._pinned()
        for start in range(0, flat.numel(), self.nbytes):
            n = min(self.nbytes, flat.numel() - start)
            buf[:n].copy_(flat[start:start + n])
            yield view[:n]

    def fill(self, fd: int, out) -> None:
        """Read the uint8 CUDA tensor `out` from `fd`, a pinned chunk at a time."""
        buf, view = self._pinned()
        for start in range(0, out.numel(), self.nbytes):
            n = min(self.nbytes, out.numel() - start)
            _read_parallel(fd, view[:n], start)
            out[start:start + n].copy_(buf[:n])


def export_tensor(t, directory: str, name: str, cuda_ipc: bool = True, staging: Staging | None = None) -> dict:
    """A description of tensor `t` another process can open: an IPC handle for a CUDA tensor while cuda_ipc,
    else a raw file of its bytes (a CUDA tensor copied to the host through `staging`) that the importer moves
    back to the tensor's device."""
    import torch

    if t.device.type == "cuda" and cuda_ipc:
        from torch.multiprocessing.reductions import reduce_tensor

        _, args = reduce_tensor(t.detach())
        (_, size, stride, offset, _, dtype, device, handle, size_bytes, offset_bytes, _, rc_handle,
         rc_offset, event_handle, event_sync) = args
        return {"kind": "cuda_ipc", "size": list(size), "stride": list(stride), "offset": int(offset),
                "dtype": str(dtype).removeprefix("torch."), "device": int(device),
                "handle": _b64(handle), "size_bytes": int(size_bytes), "offset_bytes": int(offset_bytes),
                "rc_handle": _b64(rc_handle), "rc_offset": int(rc_offset),
                "event_handle": _b64(event_handle), "event_sync": bool(event_sync)}
    src = t.detach().contiguous()
    flat = src.reshape(-1).view(torch.uint8)
    path = os.path.join(directory, f"{name}.raw")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        _write_mapped(fd, flat, staging)
    finally:
        os.close(fd)
    return {"kind": "raw", "path": path, "dtype": str(src.dtype).removeprefix("torch."), "shape": list(src.shape),
            "device": src.device.type}


def _write_mapped(fd: int, flat, staging: Staging | None) -> None:
    """Write the uint8 tensor `flat` (CPU or CUDA) to the file `fd` through a shared mapping of it: the copies
    into the mapping are torch's, which split a large copy over its threads, where os.write into a tmpfs
    file runs on one thread under the file's lock. A CUDA tensor crosses through the pinned `staging`."""
    import torch

    n = flat.numel()
    os.ftruncate(fd, n)
    if not n:
        return
    with mmap.mmap(fd, n) as mapped:
        dest = torch.frombuffer(mapped, dtype=torch.uint8)
        try:
            if flat.device.type == "cuda":
                staging = staging or Staging()
                buf, _ = staging._pinned()
                for start in range(0, n, staging.nbytes):
                    k = min(staging.nbytes, n - start)
                    buf[:k].copy_(flat[start:start + k])
                    dest[start:start + k].copy_(buf[:k])
            else:
                dest.copy_(flat)
        finally:
            del dest  # the mapping closes only once no tensor views it


def _b64(value) -> str | None:
    return None if value is None else base64.b64encode(bytes(value)).decode()


def _unb64(value) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("IPC handle is not a string")
    return base64.b64decode(value)


def import_tensor(desc: dict, directory: str, staging: Staging | None = None):
    """Open a tensor described by `export_tensor`: a raw file is checked, read and removed; a CUDA IPC handle is mapped
    (the worker keeps the memory alive until its next command)."""
    import torch

    if not isinstance(desc, dict):
        raise ValueError("tensor description is not an object")
    if desc.get("kind") == "raw":
        return _import_raw(desc, directory, staging)
    if desc.get("kind") == "cuda_ipc":
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        dtype = getattr(torch, str(desc["dtype"]))
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"bad dtype {desc['dtype']!r}")
        t = rebuild_cuda_tensor(torch.Tensor, torch.Size([int(x) for x in desc["size"]]),
                                tuple(int(x) for x in desc["stride"]), int(desc["offset"]), torch.storage.TypedStorage,
                                dtype, int(desc["device"]), _unb64(desc["handle"]), int(desc["size_bytes"]),
                                int(desc["offset_bytes"]), False, _unb64(desc["rc_handle"]), int(desc["rc_offset"]),
                                _unb64(desc["event_handle"]), bool(desc["event_sync"]))
        return t
    raise ValueError(f"unknown tensor transport {desc.get('kind')!r}")


def _dtypes() -> dict:
    import torch

    return {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


def _read_into(fd: int, view: memoryview, offset: int = 0) -> None:
    """Fill `view` with the file's bytes from `offset`; ValueError when the file ends first."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n == 0:
            raise ValueError(f"tensor file ended after {offset + done} bytes, {len(view) - done} short")
        done += n


def _read_parallel(fd: int, view: memoryview, offset: int = 0) -> None:
    """`_read_into`, split over READ_THREADS threads for a large view (each joined before this returns, so no
    thread outlives the read: a worker checks for stray threads at every call)."""
    parts = READ_THREADS if len(view) >= READ_THREADS << 22 else 1
    if parts == 1:
        _read_into(fd, view, offset)
        return
    step = -(-len(view) // parts)
    errors: list[BaseException] = []

    def read(a: int) -> None:
        try:
            _read_into(fd, view[a:a + step], offset + a)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(a,)) for a in range(0, len(view), step)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def _import_raw(desc: dict, directory, staging: Staging | None):
    """The tensor of a raw file inside `directory` (a `safe_io.ExchangeDir` held since the parent made it, or a
    path, opened here without following a link) whose size is exactly its dtype and shape's (moved to a CUDA
    device through `staging`); the file is opened and removed through the directory's fd only
    (harness/safe_io.py), so a worker that swapped a name for a link reaches nothing outside."""
    import torch

    dtype = _dtypes().get(desc.get("dtype")) if isinstance(desc.get("dtype"), str) else None
    shape = desc.get("shape")
    device = desc.get("device")
    held = isinstance(directory, safe_io.ExchangeDir)
    try:
        exchange = directory if held else safe_io.ExchangeDir(os.path.abspath(directory),
                                                              safe_io.open_dir(os.path.abspath(directory)))
    except OSError as exc:
        raise ValueError(f"exchange directory {directory}: {exc}") from exc
    try:
        path = desc.get("path")
        try:
            exchange.entry(path)
        except OSError as exc:
            raise safe_io.RefusedFile(str(exc)) from exc
        if dtype is None:
            raise ValueError(f"unknown tensor dtype {desc.get('dtype')!r}")
        if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"bad tensor shape {shape!r}")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"unknown tensor device {device!r}")
        nbytes = math.prod(shape) * dtype.itemsize
        try:
            fd, name = exchange.open(path)
        except OSError as exc:
            why = "a symlink (it may lead outside the exchange directory)" if exc.errno == 40 else exc
            raise safe_io.RefusedFile(f"tensor file {path}: {why}; refused") from exc
        try:
            info = os.fstat(fd)
            if info.st_size != nbytes:
                raise ValueError(f"tensor file of {info.st_size} bytes, not the {nbytes} of {dtype} {shape}")
            buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
            if device == "cuda":
                (staging or Staging()).fill(fd, buf)
            else:
                _read_parallel(fd, memoryview(buf.numpy()))
        finally:
            os.close(fd)
            exchange.unlink(name)  # a regular file inside the held directory: the one thing that may be removed
    finally:
        if not held:
            exchange.close()
    return buf.view(dtype).reshape(shape)
