"""Parent ⇄ worker messages (length-prefixed JSON over pipes) and tensor transport (files on CPU, CUDA IPC on GPU).

Nothing here unpickles data from the worker: CPU tensors travel as `torch.save` files read back with
`weights_only=True`, CUDA tensors as IPC handles whose fields are validated before the parent opens them.
"""

from __future__ import annotations

import base64
import json
import os
import struct

MAX_MESSAGE_BYTES = 64 << 20


def send(fd: int, message: dict) -> None:
    """Write one message to a pipe."""
    data = json.dumps(message, allow_nan=True).encode()
    os.write(fd, struct.pack("<Q", len(data)))
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            raise EOFError("worker closed its result pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(fd: int) -> dict:
    """Read one message from a pipe (blocking); ValueError when it is not a JSON object."""
    (n,) = struct.unpack("<Q", _read_exact(fd, 8))
    if n > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {n} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")
    message = json.loads(_read_exact(fd, n))
    if not isinstance(message, dict):
        raise ValueError("message is not a JSON object")
    return message


# ---- tensors -------------------------------------------------------------------------------------------


def export_tensor(t, directory: str, name: str, cuda_ipc: bool = True) -> dict:
    """A description of tensor `t` another process can open: a file for CPU tensors, an IPC handle for CUDA
    (or, with cuda_ipc=False, a host copy in a file that the importer moves back to the tensor's device)."""
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
    path = os.path.join(directory, f"{name}.pt")
    torch.save(t.detach().cpu() if t.device.type == "cuda" else t.detach().clone(), path)
    return {"kind": "file", "path": path, "device": t.device.type}


def _b64(value) -> str | None:
    return None if value is None else base64.b64encode(bytes(value)).decode()


def _unb64(value) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("IPC handle is not a string")
    return base64.b64decode(value)


def import_tensor(desc: dict, directory: str):
    """Open a tensor described by `export_tensor`: a file is read and removed; a CUDA IPC handle is mapped
    (the worker keeps the memory alive until its next command)."""
    import torch

    if not isinstance(desc, dict):
        raise ValueError("tensor description is not an object")
    if desc.get("kind") == "file":
        path = os.path.realpath(str(desc["path"]))
        if os.path.dirname(path) != os.path.realpath(directory):
            raise ValueError(f"tensor file {path} is outside the exchange directory")
        t = torch.load(path, weights_only=True, map_location="cpu")
        os.unlink(path)
        if type(t) is not torch.Tensor:
            raise ValueError(f"tensor file holds a {type(t).__name__}, not a torch.Tensor")
        if desc.get("device") == "cuda":
            t = t.to("cuda")
        elif desc.get("device") not in (None, "cpu"):
            raise ValueError(f"unknown tensor device {desc.get('device')!r}")
        return t
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
