#!/usr/bin/env bash
# Packs the GPU programs and the shared libraries they need (all but glibc's,
# CUDA's and NCCL's) into one folder, so they can run on a GPU machine that
# has the CUDA runtime but none of lisa's Debian libraries:
#   scripts/gpu-bundle.sh OUTDIR [TARGET...]
#   then, there:  LD_LIBRARY_PATH=OUTDIR/lib OUTDIR/bin/<program>
# LISA_BUNDLE_EXTRA="PROG..." adds other programs (for example bwrap for the
# controller's local backend) with their libraries.
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
progs=()
for t in "${targets[@]}"; do
  f=$t
  [ "$t" = lisa-cli ] && f=lisa # the command line's target; `lisa` is the library
  progs+=("build/cuda/bin/$f")
done
for p in ${LISA_BUNDLE_EXTRA:-}; do progs+=("$(command -v "$p")"); done
for p in "${progs[@]}"; do
  cp "$p" "$out/bin/"
  ldd "$p" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|ld-linux*|libgcc_s*|libstdc++*|libresolv*|libnss*|libanl*) ;;
      libcuda*|libcublas*|libcudart*|libnccl*|libnvidia*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
echo "bundle: $(du -sh "$out" | cut -f1) in $out"
