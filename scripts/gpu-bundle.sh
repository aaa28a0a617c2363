#!/usr/bin/env bash
# Packs the GPU programs and the shared libraries they need (all but glibc's,
# CUDA's and NCCL's) into one folder, so they can run on a GPU machine that
# has the CUDA runtime but none of lisa's Debian libraries:
#   scripts/gpu-bundle.sh OUTDIR [TARGET...]
#   then, there:  LD_LIBRARY_PATH=OUTDIR/lib OUTDIR/bin/<program>
set -euo pipefail
out=${1:?usage: gpu-bundle.sh OUTDIR [TARGET...]}
shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(trn_cuda_kernels_test trn_gpu_model_test)
cd "$(dirname "$0")/.."
cmake --preset cuda >/dev/null
cmake --build --preset cuda -j "${LISA_JOBS:-$(nproc)}" --target "${targets[@]}"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for t in "${targets[@]}"; do
  cp "build/cuda/bin/$t" "$out/bin/"
  ldd "build/cuda/bin/$t" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|ld-linux*|libgcc_s*|libstdc++*|libresolv*|libnss*|libanl*) ;;
      libcuda*|libcublas*|libcudart*|libnccl*|libnvidia*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
echo "bundle: $(du -sh "$out" | cut -f1) in $out"
