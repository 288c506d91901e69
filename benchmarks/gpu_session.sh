#!/usr/bin/env bash
# One device session's measurements (run on a lent GPU machine from the repository root; writes $OUT).
# H100: the dense shapes the BLIS vLLM-V1 H100 runs serve (Llama-2-7B TP1, Llama-2-70B TP4, CodeLlama-34B TP2)
# with benchmarks/gpu_profile.py, then benchmarks/gpu_profile_moe.py. Other GPUs: the MoE/FP8 file only.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/device.txt"
python3 -c "import torch, numpy; print('torch', torch.__version__, torch.cuda.get_device_name())" 2>&1 | tee -a "$OUT/device.txt"
cd benchmarks
t0=$(date +%s)
timeout 200 python3 gpu_profile_moe.py --out "$OUT/moe.json" 2>"$OUT/moe.log"; echo "moe rc=$? $(( $(date +%s) - t0 )) s" | tee -a "$OUT/device.txt"
if nvidia-smi -L | grep -q H100; then
  for spec in "llama-2-70b 4" "codellama-34b 2" "llama-2-7b 1"; do
    set -- $spec
    timeout 100 python3 gpu_profile.py --out "$OUT/${1}_tp${2}.json" --model "$1" --tp "$2" 2>>"$OUT/dense.log"
    echo "$1 tp$2 rc=$? $(( $(date +%s) - t0 )) s" | tee -a "$OUT/device.txt"
  done
fi
tail -3 "$OUT/moe.log"; tail -3 "$OUT/dense.log" 2>/dev/null
