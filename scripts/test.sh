#!/usr/bin/env bash
# scripts/test.sh — the whole test suite: installs what is missing, builds
# with -Werror and runs every suite through ctest; then does the same in an
# AddressSanitizer + UndefinedBehaviorSanitizer build. Exits non-zero on any
# failure. Set TSR_TEST_SKIP_SANITIZE=1 to run the first pass only.
set -euo pipefail
source "$(dirname "$0")/common.sh"

"$tsr_root/scripts/deps.sh" "${TSR_PACKAGES[@]}"

run_suite() {
    local dir="$1"
    shift
    echo "== building $dir"
    tsr_build "$dir" -DTSR_WERROR=ON "$@"
    echo "== testing $dir"
    (cd "$dir" && ctest --output-on-failure --timeout 1800)
}

start=$(date +%s)
run_suite "$tsr_root/build-test" -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${TSR_TEST_SKIP_SANITIZE:-0}" != 1 ]; then
    export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    run_suite "$tsr_root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DTSR_SANITIZE=ON -DTSR_BUILD_BENCH=OFF
fi
echo "== all suites passed in $(( $(date +%s) - start )) s"
