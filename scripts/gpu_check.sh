#!/usr/bin/env bash
# scripts/gpu_check.sh — the Vulkan backend on a machine with a GPU: builds
# tessera (Release), runs the Vulkan suites on the Vulkan devices there (the
# validation layer on when it is installed) and bench_ops' Vulkan rows, which
# include F16 and F32 GEMM 4096³ in TFLOP/s on GPUs. Results go to $OUT when
# set (else build-gpu/gpu_check/): gpu_check.log (everything), ops.md and
# ops.jsonl (the benchmark), tests.log (ctest). Exit status: non-zero when
# the build or a test fails. About 5 minutes on 16 cores.
#
# Needs a C compiler, CMake and Ninja, the Vulkan loader and headers, glslc
# and OpenBLAS; Criterion for the tests (without it only the benchmark runs).
#
# On this project's GPU machines (the `device` tool; see its README) the
# Vulkan loader may be missing and nothing can be fetched there, so carry
# what is missing as .deb files, downloaded here, in the repository root:
#   echo /.gl/ >> .git/info/exclude; mkdir -p .gl/deps /tmp/amd64/partial
#   o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
#   apt-get $o update
#   (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
#   (cd .gl/deps && apt-get $o download libvulkan-dev glslc libshaderc1 libopenblas-dev \
#        libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5)
# and run with `carry: [".gl"]`. This script unpacks .gl/*.deb into / (the
# loader, as the device README prescribes) and .gl/deps/*.deb into a prefix
# of its own (build tools and libraries must not overwrite the system), and
# points the loader at NVIDIA's driver when it finds no other.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TSR_GPU_CHECK_BUILD:-$root/build-gpu}"
out="${OUT:-$build/gpu_check}"
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1

# ---- carried packages ----------------------------------------------------------------------
if compgen -G "$root/.gl/*.deb" >/dev/null; then
    for f in "$root"/.gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
if compgen -G "$root/.gl/deps/*.deb" >/dev/null; then
    prefix=/tmp/tsr-deps
    for f in "$root"/.gl/deps/*.deb; do dpkg -x "$f" "$prefix"; done
    lib="$prefix/usr/lib/x86_64-linux-gnu"
    # OpenBLAS is reached through the alternatives symlinks dpkg -x does not make.
    for d in "$lib"/openblas-pthread; do [ -d "$d" ] && cp -a "$d"/lib*.so* "$lib"/ 2>/dev/null; done
    export PATH="$prefix/usr/bin:$PATH"
    export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}"
    export PKG_CONFIG_PATH="$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:${PKG_CONFIG_PATH:-}"
    export PKG_CONFIG_SYSROOT_DIR="$prefix"
    export CMAKE_PREFIX_PATH="$prefix/usr"
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ] && ! ls /usr/share/vulkan/icd.d/*nvidia* >/dev/null 2>&1; then
    export VK_DRIVER_FILES="$icd"
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
echo "== machine: $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"

# ---- build ------------------------------------------------------------------------------------
tests=ON
pkg-config --exists criterion 2>/dev/null || { tests=OFF; echo "== Criterion not found: tests skipped"; }
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTSR_VULKAN=ON \
    -DTSR_BUILD_TESTS=$tests >"$out/cmake.log" 2>&1 || { cat "$out/cmake.log"; exit 1; }
grep "tessera:" "$out/cmake.log"
cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
"$build/tools/tessera" devices || true

# ---- tests --------------------------------------------------------------------------------------
status=0
if [ $tests = ON ]; then
    (cd "$build" && ctest --output-on-failure -R 'vulkan|test_backend_ops$|test_backend$' \
        >"$out/tests.log" 2>&1) || status=1
    tail -30 "$out/tests.log"
fi

# ---- benchmark ---------------------------------------------------------------------------------
"$build/bench/bench_ops" --vulkan --out "$out" || status=1
echo "== results in $out (status $status)"
exit $status
