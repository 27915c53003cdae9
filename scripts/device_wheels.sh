#!/usr/bin/env bash
# Download into .whl/ (git-ignored) the Python 3.12 x86-64 wheels that bench/gpu_check.py needs
# on a GPU machine whose image has torch 2.11, transformers 5.17, accelerate 1.15,
# huggingface_hub 1.33, tokenizers 0.23.2, safetensors, pandas, pyarrow and triton, but no
# trl, no datasets and no network:
#   bash scripts/device_wheels.sh
# There they install with
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
# What travels, each at requirements.txt's pin where it has one:
#   trl, datasets               missing there
#   dill, multiprocess          datasets' needs the image lacks (the rest of its and trl's
#                               Requires-Dist is there: filelock, numpy, pyarrow, pandas, tqdm,
#                               xxhash, fsspec, huggingface-hub, packaging, pyyaml, jinja2,
#                               psutil, accelerate)
#   transformers, peft          our pins (the image's transformers is 5.17); transformers 5.24
#                               takes the image's huggingface-hub (>=1.31) and tokenizers
#                               (>=0.23.1), so neither travels (huggingface-hub 2.x would need
#                               httpx2, which the image lacks)
#   rapidfuzz, starlette        dragonfarm_core.data imports rapidfuzz, and dragon.check()'s
#                               profile line http_guard, which imports starlette (at the
#                               version fastapi's pin installs; it needs only anyio, there)
#   liger-kernel                TRL's use_liger_kernel (Triton kernels; needs torch, triton)
#   bitsandbytes                QLoRA, with only the CUDA 13.0 and CPU libraries kept (the
#                               whole wheel, 41 MiB, does not fit a call's 64 MiB with the
#                               working tree); RECORD is rewritten to match
# torch stays the image's. Fails when the wheels pass 60 MiB, or the wheels and the working tree
# that travels with them pass a device call's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.whl
LIMIT_MIB=60
CALL_MIB=64
CUDA_LIB=cuda130  # torch 2.11.0+cu130 on the GPU machine

pin() {  # NAME==VERSION from requirements.txt
  local line
  line=$(grep -i -E "^$1==" requirements.txt) || { echo "no pin for $1 in requirements.txt" >&2; exit 1; }
  echo "$line"
}

WANT=(
  "$(pin trl)" "$(pin datasets)" "$(pin transformers)" "$(pin peft)"
  "dill==0.4.1" "multiprocess==0.70.19" "$(pin rapidfuzz)" "starlette==1.10.0"
  "liger-kernel==0.8.5"
  "bitsandbytes==0.50.2"
)

rm -rf "$DEST"
mkdir -p "$DEST"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" "${WANT[@]}"

# bitsandbytes: keep the CPU library and the one for the image's CUDA.
python3 - "$DEST" "$CUDA_LIB" <<'EOF'
import base64, hashlib, sys, zipfile
from pathlib import Path

dest, keep = Path(sys.argv[1]), sys.argv[2]
for wheel in dest.glob("bitsandbytes-*.whl"):
    def wanted(name: str) -> bool:
        lib = name.rsplit("/", 1)[-1]
        return not lib.startswith("libbitsandbytes_") or lib.startswith(
            (f"libbitsandbytes_{keep}.", "libbitsandbytes_cpu."))
    slim = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as out:
        records = []
        for info in src.infolist():
            if not wanted(info.filename) or info.filename.endswith(".dist-info/RECORD"):
                continue
            data = src.read(info)
            out.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            records.append(f"{info.filename},sha256={digest.decode()},{len(data)}")
        record = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        out.writestr(record, "\n".join(records + [f"{record},,"]) + "\n")
    slim.replace(wheel)
EOF

ls -l "$DEST"
WHEELS=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
TREE=$( (git ls-files -z; git ls-files -z -o --exclude-standard) | du -cb --files0-from=- | tail -1 | cut -f1)
MIB=$((1024 * 1024))
printf 'wheels: %d files, %.1f MiB; working tree %.1f MiB; together %.1f MiB of a call'"'"'s %d\n' \
  "$(ls "$DEST"/*.whl | wc -l)" "$(echo "$WHEELS / $MIB" | bc -l)" "$(echo "$TREE / $MIB" | bc -l)" \
  "$(echo "($WHEELS + $TREE) / $MIB" | bc -l)" "$CALL_MIB"
if [ "$WHEELS" -gt $((LIMIT_MIB * MIB)) ]; then
  echo "the wheels pass $LIMIT_MIB MiB" >&2; exit 1
fi
if [ $((WHEELS + TREE)) -gt $((CALL_MIB * MIB)) ]; then
  echo "the wheels and the working tree pass a device call's $CALL_MIB MiB" >&2; exit 1
fi
