#!/usr/bin/env bash
# The main job: run the conformance suites against a device and build the reports in reports/out/.
#
#   scripts/conformance.sh [--device NAME] [extra pytest options...]
#
# With --device (or a device in /sys/class/infiniband) the suites run on this host.
# Without one, they run against SoftRoCE rxe0 in a QEMU VM (qpconform vm), built on first use;
# QPCONFORM_RELEASE=trixie picks Debian 13 (Linux 6.12) instead of bookworm (Linux 6.1);
# QPCONFORM_RELEASE=trixie-backports Debian 13 with the kernel of trixie-backports (7.3 in 2026-12).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh
qpconform_bootstrap || exit 1

device=""
if [ "${1:-}" = "--device" ]; then
    device="${2:?--device needs a name}"
    shift 2
elif [ -d /sys/class/infiniband ] && [ -n "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
    device="$(ls /sys/class/infiniband | head -n 1)"
fi

out=reports/out
rm -rf "$out"
mkdir -p "$out"
profile="${QPCONFORM_PROFILE:-default}"
[ -n "${CI:-}" ] && profile="${QPCONFORM_PROFILE:-ci}"
suite_args=(suites/ --hypothesis-profile "$profile" --junitxml "$out/junit.xml"
            --alluredir "$out/allure-results" -p no:cacheprovider "$@")
# pytest-xdist workers: one per core, at most 4 (and the VM's 2 vCPUs); QPCONFORM_WORKERS=0 runs
# serially. Same verdict either way (each worker opens its own contexts and QPs; the records of
# all workers make one report); -n 2 measured 1.74x faster in the TCG guest on 2 cores.
workers="${QPCONFORM_WORKERS:-$(nproc 2>/dev/null || echo 1)}"
[ "$workers" -gt 4 ] && workers=4
[ -z "$device" ] && [ "$workers" -gt 2 ] && workers=2
case " $* " in *" -n "*|*" --numprocesses"*|*" -p no:xdist "*) workers=0 ;; esac
[ "$workers" -ge 2 ] && suite_args+=(-n "$workers")

if [ -n "$device" ]; then
    echo "qpconform: running the suites on this host's device $device"
    python -m pytest --device "$device" "${suite_args[@]}"
    status=$?
else
    echo "qpconform: no RDMA device on this host: running against SoftRoCE rxe0 in a VM"
    if ! command -v qemu-system-x86_64 >/dev/null || ! command -v mmdebstrap >/dev/null; then
        if [ "$(id -u)" -eq 0 ]; then
            qpconform vm --install-deps || exit 1
        fi
    fi
    qpconform vm --release "${QPCONFORM_RELEASE:-bookworm}" \
        --timeout "${QPCONFORM_VM_TIMEOUT:-2400}" -- \
        python3 -m pytest --device rxe0 "${suite_args[@]}"
    status=$?
fi

if ! qpconform report --input "$out" --output "$out"; then
    echo "qpconform: the report could not be built" >&2
    [ "$status" -eq 0 ] && status=1
fi
echo "qpconform: reports in $out/ (report.html, report.json, junit.xml, allure-results/)"
exit "$status"
