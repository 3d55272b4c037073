# scripts/common.sh — shared by main.sh and test.sh: the package list and the
# configure-and-build step. Sourced, not run.

# Build and test dependencies (see the README's dependency table). The Vulkan
# ones build the Vulkan backend and run its tests on lavapipe (a CPU Vulkan
# device) under the Khronos validation layer.
TSR_PACKAGES=(build-essential cmake ninja-build pkg-config libopenblas-dev libcriterion-dev
              libvulkan-dev glslc mesa-vulkan-drivers vulkan-validationlayers)

# RPC (remote devices): NNG is the transport, mbedTLS gives the HMAC-SHA256 of
# the token handshake (NNG's TLS uses it too).
TSR_PACKAGES+=(libnng-dev libmbedtls-dev)

tsr_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# tsr_build DIR [cmake options...] [--target T]: configures and builds DIR
# (everything, or only target T).
tsr_build() {
    local dir="$1" target=()
    shift
    local opts=()
    while [ $# -gt 0 ]; do
        if [ "$1" = --target ]; then target=(--target "$2"); shift 2; else opts+=("$1"); shift; fi
    done
    cmake -S "$tsr_root" -B "$dir" -G Ninja "${opts[@]}" >/dev/null
    cmake --build "$dir" -j "$(nproc)" "${target[@]}"
}
