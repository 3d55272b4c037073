# scripts/common.sh — shared by main.sh and test.sh: the package list and the
# configure-and-build step. Sourced, not run.

# Build and test dependencies (see the README's dependency table).
TSR_PACKAGES=(build-essential cmake ninja-build pkg-config libopenblas-dev libcriterion-dev)

tsr_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# tsr_build DIR [cmake options...]: configures (once) and builds into DIR.
tsr_build() {
    local dir="$1"
    shift
    cmake -S "$tsr_root" -B "$dir" -G Ninja "$@" >/dev/null
    cmake --build "$dir" -j "$(nproc)"
}
