#!/usr/bin/env bash
# Captures the example traces (examples/traces/) and the ingest benchmark trace on one GPU.
# Run from the repo root on a CUDA machine with torch and transformers:
#   OUT=/tmp/captures bash benchmarks/capture_examples.sh
# Writes $OUT/captures.tar (examples/ and bench/ trees) and $OUT/capture.log.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/captures}
work=$(mktemp -d)
log=$OUT/capture.log
mkdir -p "$OUT"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, torch.cuda.get_device_name())' | tee "$log"
cap() { echo "== $*" | tee -a "$log"; python3 -m kernels_eval.capture "$@" >>"$log" 2>&1 || echo "FAILED: $*" | tee -a "$log"; }
ex=$work/examples/traces
cap --model llama3-8b --batch 8 --prompt-len 512 --decode-steps 6 --annotate --out $ex/llama3-8b/eager.json.gz
cap --model llama3-8b --batch 8 --prompt-len 512 --decode-steps 6 --cuda-graph --out $ex/llama3-8b/graph.json.gz
cap --model qwen3-30b-a3b --batch 8 --prompt-len 256 --decode-steps 4 --annotate --out $ex/qwen3-30b-a3b/eager.json.gz
cap --model qwen3-30b-a3b --batch 8 --prompt-len 256 --decode-steps 4 --cuda-graph --out $ex/qwen3-30b-a3b/graph.json.gz
cap --model llama3-8b --layers 2 --batch 4 --prompt-len 256 --decode-steps 4 --compile --annotate --out $ex/llama3-8b-compiled/eager.json.gz
cap --model deepseek-v2-lite --batch 8 --prompt-len 256 --decode-steps 4 --annotate --out $ex/deepseek-v2-lite/eager.json.gz
# A large trace for the ingest benchmark: Python stacks on, as vLLM profiles by default.
cap --model llama3-8b --layers 16 --batch 8 --prompt-len 512 --decode-steps 24 --with-stack --annotate --out $work/bench/llama3-8b-stack.json.gz
# A large MoE trace for the 10x ingest benchmark (benchmarks/data/qwen3-30b-a3b-moe.json.gz, 59.6 MB of JSON).
cap --model qwen3-30b-a3b --layers 12 --batch 8 --prompt-len 256 --decode-steps 16 --annotate --out $work/bench/qwen3-30b-a3b-moe.json.gz
(cd $work && find . -type f -exec ls -l {} \; | tee -a "$log")
tar -C $work -cf $OUT/captures.tar .
tail -40 "$log"
