"""Profile a transformers architecture with random weights in a serving-like loop into a Kineto trace.

Batched prefill, then decode steps over a static KV cache, eager or replayed from a CUDA graph
(whose capture phase is profiled into `capture_traces/`, as vLLM and SGLang do), optionally under
torch.compile. Nothing is downloaded: the model is built from a config with random weights.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import sys
from pathlib import Path

import yaml

MODELS_FILE = Path(__file__).with_name("capture_models.yaml")


def load_models(path: Path = MODELS_FILE) -> dict:
    """The architectures `capture` can build, by name."""
    return yaml.safe_load(path.read_text())


def build_model(name: str, layers: int | None, device: str, dtype):
    """A causal LM of architecture `name` with random weights on `device`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    models = load_models()
    if name not in models:
        raise SystemExit(f"hotshape capture: unknown model {name!r}; known: {', '.join(sorted(models))}")
    spec = models[name]
    config = AutoConfig.for_model(spec["model_type"], **spec["config"])
    config.num_hidden_layers = layers or spec["layers"]
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        except TypeError:  # transformers < 4.56 spells it torch_dtype
            model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
    return model.eval(), config


def static_cache(config, batch: int, max_len: int, device: str, dtype):
    """A StaticCache for `batch` sequences of up to `max_len` tokens, across transformers versions."""
    from transformers import StaticCache

    for kwargs in (
        {"config": config, "max_cache_len": max_len},
        {"config": config, "max_batch_size": batch, "max_cache_len": max_len, "device": device, "dtype": dtype},
    ):
        try:
            return StaticCache(**kwargs)
        except TypeError:
            continue
    raise RuntimeError("this transformers version's StaticCache takes none of the known signatures")


def write_capture_sidecar(capture_path: Path, batch: int, mode: str) -> Path:
    """Record a capture trace in its folder's execution_details.json, which ingest pairs replays by."""
    sidecar = capture_path.parent / "execution_details.json"
    entries = json.loads(sidecar.read_text()) if sidecar.exists() else []
    entries = [e for e in entries if e.get("file") != capture_path.name]
    entries.append({"file": capture_path.name, "batch_size": batch, "mode": mode})
    sidecar.write_text(json.dumps(entries, indent=2) + "\n")
    return sidecar


def _annotation(enabled: bool, name: str):
    import torch

    return torch.profiler.record_function(name) if enabled else contextlib.nullcontext()


def capture(args: argparse.Namespace) -> dict:
    """Run the serving loop under the profiler; the paths written and what ran."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    device = "cuda"
    dtype = torch.bfloat16
    model, config = build_model(args.model, args.layers, device, dtype)
    forward = torch.compile(model.forward) if args.compile else model.forward
    batch, prompt, steps = args.batch, args.prompt_len, args.decode_steps
    max_len = prompt + steps + 1
    generator = torch.Generator(device=device).manual_seed(args.seed)
    prompt_ids = torch.randint(0, config.vocab_size, (batch, prompt), device=device, generator=generator)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def prefill(cache):
        positions = torch.arange(prompt, device=device)
        logits = forward(input_ids=prompt_ids, past_key_values=cache, cache_position=positions, use_cache=True).logits
        return logits[:, -1:].argmax(-1)

    def decode_eager(cache, token, position):
        pos = torch.tensor([position], device=device)
        logits = forward(input_ids=token, past_key_values=cache, cache_position=pos, use_cache=True).logits
        return logits[:, -1:].argmax(-1)

    cache_kind = args.cache or load_models()[args.model].get("cache", "static")

    def new_cache():
        if cache_kind == "dynamic":  # architectures whose K and V widths differ (MLA) in HF's static cache
            from transformers import DynamicCache

            return DynamicCache()
        return static_cache(config, batch, max_len, device, dtype)

    if args.cuda_graph and cache_kind != "static":
        raise SystemExit("hotshape capture: --cuda-graph needs --cache static (graphs replay fixed addresses)")
    # Warm-up outside the profiled window: allocator, cuBLAS handles, compilation.
    with torch.no_grad():
        cache = new_cache()
        token = prefill(cache)
        decode_eager(cache, token, prompt)
    torch.cuda.synchronize()

    graph = None
    capture_path = None
    with torch.no_grad():
        cache = new_cache()
        if args.cuda_graph:
            static_token = torch.zeros((batch, 1), dtype=torch.long, device=device)
            static_pos = torch.tensor([prompt], device=device)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    forward(input_ids=static_token, past_key_values=cache, cache_position=static_pos, use_cache=True)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            capture_path = out.parent / "capture_traces" / f"{out.name.split('.')[0]}.capture.json.gz"
            capture_path.parent.mkdir(parents=True, exist_ok=True)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as cap:
                with _annotation(True, f"capture_{batch}_decode"):
                    with torch.cuda.graph(graph):
                        static_logits = forward(
                            input_ids=static_token, past_key_values=cache, cache_position=static_pos, use_cache=True
                        ).logits
            cap.export_chrome_trace(str(capture_path))
            write_capture_sidecar(capture_path, batch, "FULL")
            cache.reset()
        torch.cuda.synchronize()

        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            record_shapes=True,
            with_stack=args.with_stack,
        ) as prof:
            with _annotation(args.annotate, f"prefill[bs={batch} toks={batch * prompt}]"):
                token = prefill(cache)
            for step in range(steps):
                with _annotation(args.annotate, f"decode[bs={batch}]"):
                    if graph is not None:
                        static_token.copy_(token)
                        static_pos.fill_(prompt + step)
                        graph.replay()
                        token = static_logits[:, -1:].argmax(-1)
                    else:
                        token = decode_eager(cache, token, prompt + step)
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(out))
    info = {
        "trace": str(out),
        "capture_trace": str(capture_path) if capture_path else None,
        "model": args.model,
        "layers": config.num_hidden_layers,
        "batch": batch,
        "prompt_len": prompt,
        "decode_steps": steps,
        "cuda_graph": bool(args.cuda_graph),
        "compile": bool(args.compile),
        "device_name": torch.cuda.get_device_name(),
    }
    return info


def add_capture_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `hotshape capture`."""
    parser.add_argument("--model", required=True, help=f"one of the architectures in {MODELS_FILE.name}")
    parser.add_argument("--layers", type=int, default=None, help="decoder layers to build (default: the model's entry)")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step")
    parser.add_argument("--prompt-len", type=int, default=512, help="prompt tokens per sequence (prefill)")
    parser.add_argument("--decode-steps", type=int, default=8, help="decode steps after the prefill")
    parser.add_argument("--cuda-graph", action="store_true", help="replay decode steps from a captured CUDA graph")
    parser.add_argument(
        "--cache", choices=("static", "dynamic"), default=None, help="KV cache kind (default: the model's entry, else static)"
    )
    parser.add_argument("--compile", action="store_true", help="run the model under torch.compile")
    parser.add_argument("--annotate", action="store_true", help="mark each step with a prefill/decode annotation")
    parser.add_argument("--with-stack", action="store_true", help="record Python stacks (large traces)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs (default 0)")
    parser.add_argument("--out", required=True, help="trace path, ending in .json.gz")
    parser.add_argument("--json", action="store_true", help="print what was captured as JSON on stdout")


def capture_problem(args: argparse.Namespace) -> str | None:
    """Why `capture` cannot run here (an unknown model, no transformers, no CUDA GPU), or None; checked before
    anything is built or written."""
    import importlib.util

    models = load_models()
    if args.model not in models:
        close = difflib.get_close_matches(args.model, sorted(models), n=3, cutoff=0.6)
        return (f"--model {args.model!r} is not in {MODELS_FILE.name}"
                + (f" (did you mean {', '.join(close)}?)" if close else f" (known: {', '.join(sorted(models))})"))
    if importlib.util.find_spec("transformers") is None:
        return "needs the transformers package (pip install transformers): the models are its architectures"
    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch.cuda.is_available() is False here): it profiles GPU kernels"
    return None


def summary_line(info: dict) -> str:
    """One line of what `capture` wrote."""
    extras = [x for x, on in (("CUDA graph", info.get("cuda_graph")), ("torch.compile", info.get("compile"))) if on]
    return (f"{info.get('trace')}: {info.get('model')} ({info.get('layers')} layers), batch {info.get('batch')}, "
            f"prompt {info.get('prompt_len')} tokens, {info.get('decode_steps')} decode steps"
            + (f", {', '.join(extras)}" if extras else "") + f" on {info.get('device_name')}")


def capture_from_args(args: argparse.Namespace) -> int:
    """`hotshape capture`: exit status after writing the trace (2, with one line, when it cannot run here)."""
    problem = capture_problem(args)
    if problem is not None:
        print(f"hotshape capture: {problem}", file=sys.stderr)
        return 2
    info = capture(args)
    print(json.dumps(info) if getattr(args, "json", False) else summary_line(info))
    return 0


if __name__ == "__main__":  # the GPU machine runs this without installing hotshape's CLI deps
    _parser = argparse.ArgumentParser(prog="python -m kernels_eval.capture", description=__doc__)
    add_capture_arguments(_parser)
    sys.exit(capture_from_args(_parser.parse_args()))
