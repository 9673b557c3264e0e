#!/usr/bin/env bash
# Determinism: the ci profile, N times (default 5) in one VM boot on the same kernel, then
# `qpconform report --same` over the runs: exit 1 if any verdict or divergence differs.
#
#   scripts/determinism.sh [N] [extra pytest options...]
#
# QPCONFORM_RELEASE=trixie picks Debian 13 (Linux 6.12), trixie-backports its newest kernel; runs land in reports/out/determinism/.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh
qpconform_bootstrap || exit 1

runs="${1:-5}"
shift || true
case "$runs" in ''|*[!0-9]*) echo "determinism.sh: N must be a number of runs, got '$runs'" >&2; exit 2 ;; esac
out=reports/out/determinism
rm -rf "$out"
mkdir -p "$out"
guest="
for i in \$(seq 1 $runs); do
    start=\$(date +%s)
    QPCONFORM_OUT_DIR=$out/run\$i python3 -m pytest suites/ --device rxe0 --hypothesis-profile ci \
        -n 2 -q -p no:cacheprovider $* > $out/run\$i.log 2>&1
    echo \"run \$i: pytest exit \$? in \$((\$(date +%s) - start)) s\"
done
"
qpconform vm --release "${QPCONFORM_RELEASE:-bookworm}" --log-dir "$out" \
    --timeout "${QPCONFORM_VM_TIMEOUT:-$((runs * 900))}" -- sh -c "$guest" || exit $?
dirs=()
for i in $(seq 1 "$runs"); do dirs+=("$out/run$i"); done
qpconform report --same "${dirs[@]}" | tee "$out/same.txt"
exit "${PIPESTATUS[0]}"
