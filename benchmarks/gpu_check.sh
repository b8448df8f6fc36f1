#!/usr/bin/env bash
# The device checks of a session that is lent a GPU machine, as one call (see benchmarks/README.md,
# "On a lent GPU machine"): the forward-only methods and Guided IG / XRAI against their bounds and
# peers on the GPU, the GPU tests, and the LeNet SmInt job on that machine's CPU (AVX-512 there)
# on 2 cores, with and without the AVX2 kernels. Results go to $OUT (the device tool brings them
# back). Peers travel as wheels in .whl/ (captum, saliency, grad-cam + ttach, zarr + its needs,
# tensorboardX; torch, torchvision and the rest are on the machine).
#
#   bash benchmarks/gpu_check.sh [steps]     # steps: any of bench (= gradient,methods),tests,cpu,profile (default bench,tests,cpu)
set -u
OUT=${OUT:-/tmp/xaikit-gpu-check}
mkdir -p "$OUT"
STEPS=${1:-bench,tests,cpu}
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2 MPLBACKEND=Agg TQDM_DISABLE=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=$PWD:/tmp/site
else
    export PYTHONPATH=$PWD
fi
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    lscpu | grep -E "^Model name|^CPU\(s\)"
    echo "avx512 flags: $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    python3 -c "import torch; print('torch', torch.__version__, 'cpu capability', torch.backends.cpu.get_cpu_capability())"
} 2>&1 | tee "$OUT/machine.txt"

step() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
t0=$(date +%s)
# GRADIENT_JSON: an earlier gradient-family.json for the methods' targets table (step "methods"
# alone); the step "gradient" writes a new one
GRADIENT_JSON=${GRADIENT_JSON:-$OUT/gradient-family.json}
if step bench || step gradient; then
    timeout 200 python3 benchmarks/gradient_family_bench.py --device cuda --models resnet18 \
        --methods guided_ig,xrai --reps 3 --json "$OUT/gradient-family.json" --out "$OUT/benchmarks.md" \
        > "$OUT/gradient-family.log" 2>&1
    echo "gradient family rc=$? at $(($(date +%s) - t0)) s"
    grep -E "Guided IG|XRAI" "$OUT/gradient-family.log" | tail -8
fi
if step bench || step methods; then
    timeout 300 python3 benchmarks/methods_bench.py --device cuda --reps 3 --profile --sizes 256,512,1024 \
        --gradient-json "$GRADIENT_JSON" --json "$OUT/methods.json" --out "$OUT/benchmarks.md" \
        > "$OUT/methods.log" 2>&1
    echo "methods rc=$? at $(($(date +%s) - t0)) s"
    grep -E "^(bound/|scorecam|rise|occlusion)|bound search" "$OUT/methods.log" | cut -c1-400
fi
if step profile; then
    timeout 120 python3 benchmarks/host_profile.py --device cuda --calls 5 --top 30 > "$OUT/host-profile.txt" 2>&1
    echo "host profile rc=$? at $(($(date +%s) - t0)) s"
    grep "=====" "$OUT/host-profile.txt"
fi
if step tests; then
    timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py > "$OUT/gpu-tests.log" 2>&1
    echo "gpu tests rc=$? at $(($(date +%s) - t0)) s"
    tail -15 "$OUT/gpu-tests.log"
fi
if step cpu; then
    for isa in default avx2; do
        if [ "$isa" = avx2 ]; then env_isa="ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2"; else env_isa=""; fi
        env $env_isa CUDA_VISIBLE_DEVICES= taskset -c 0,1 timeout 150 python3 benchmarks/real_models_bench.py \
            --cases lenet --reps 5 --threads 2 --json "$OUT/lenet-$isa.json" --out "$OUT/lenet-$isa.md" \
            > "$OUT/lenet-$isa.log" 2>&1
        echo "lenet ($isa kernels) rc=$? at $(($(date +%s) - t0)) s"
        grep -E "^lenet" "$OUT/lenet-$isa.log"
    done
fi
