#!/usr/bin/env bash
# The main job: run the conformance suites against a device and build the reports in reports/out/.
#
#   scripts/conformance.sh [--device NAME] [extra pytest options...]
#
# With --device (or a device in /sys/class/infiniband) the suites run on this host.
# Without one, they run against SoftRoCE rxe0 in a QEMU VM (qpconform vm), built on first use:
# pytest and its engine on this host, the device behind the guest's executor, one session per
# xdist worker (qpconform vm --host-engine: about 2x faster than the whole run inside under TCG);
# QPCONFORM_HOST_ENGINE=0 runs everything inside.
# Extra options go to pytest.
# QPCONFORM_RELEASE=trixie picks Debian 13 (Linux 6.12) instead of bookworm (Linux 6.1);
# QPCONFORM_RELEASE=trixie-backports Debian 13 with the kernel of trixie-backports (7.3 in 2026-12).
# QPCONFORM_DRIVER=siw runs against Soft-iWARP siw0 (built out of tree; pairs span siw0 -> siw1,
# connected through rdma_cm) instead of rxe0, inside the guest (QPCONFORM_HOST_ENGINE=1: on this
# host, the executor connecting the pairs; not the default yet: qpconform/vm/host_engine.py says why).
set -uo pipefail
cd "$(dirname "$0")/.."
driver="${QPCONFORM_DRIVER:-rxe}"  # the VM's device, when this host has none
case "$driver" in
    rxe) vm_device=rxe0; vm_devices=(--device rxe0); host_engine=1 ;;  # pairs on rxe0 alone
    siw) vm_device=siw0; vm_devices=(--device siw0 --peer-device siw1); host_engine=0 ;;  # =1 works (qpconform/vm/host_engine.py)
    *) echo "qpconform: QPCONFORM_DRIVER=$driver is not one of: rxe, siw" >&2; exit 2 ;;
esac
. scripts/bootstrap.sh
qpconform_bootstrap || exit 1
qpconform_allure  # never fatal: without it the report says why there is no Allure report

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
# pytest's options but the selection (the same wherever the suites run)
suite_options=(--hypothesis-profile "$profile" --junitxml "$out/junit.xml"
               --alluredir "$out/allure-results" -p no:cacheprovider "$@")
# pytest-xdist workers: one per core, at most 4 (and the VM's 2 vCPUs); QPCONFORM_WORKERS=0 runs
# serially. Same verdict either way (each worker opens its own contexts and QPs; the records of
# all workers make one report); -n 2 measured 1.74x faster in the TCG guest on 2 cores.
workers="${QPCONFORM_WORKERS:-$(nproc 2>/dev/null || echo 1)}"
[ "$workers" -gt 4 ] && workers=4
[ -z "$device" ] && [ "$workers" -gt 2 ] && workers=2
user_xdist=""
case " $* " in *" -n "*|*" --numprocesses"*|*" -p no:xdist "*) workers=0; user_xdist=1 ;; esac
[ "$workers" -ge 2 ] && suite_options+=(-n "$workers")
suite_args=(suites/ "${suite_options[@]}")

# In the VM (rxe): every suite on this host against the guest's executor, one session per worker:
# the lone-QP suites first (where a broken driver is caught soonest), then the pair suites.
lone_suites=(suites/test_transitions.py suites/test_attributes.py suites/test_post_rules.py
             suites/test_stateful.py)
pair_suites=(suites/test_error_handling.py suites/test_drain.py suites/test_operations.py
             suites/test_srq.py suites/test_shared_cq.py suites/test_memory_protection.py
             suites/test_traffic_stateful.py)
run_with_host_engine() {
    local sessions=1
    [ "$workers" -ge 2 ] && sessions=$workers
    echo "qpconform: the suites run on this host, their engine here and $vm_device behind the guest's executor"
    qpconform vm "${vm_args[@]}" --host-engine "$sessions" -- \
        python -m pytest --device "$vm_device" "${lone_suites[@]}" "${pair_suites[@]}" \
        "${suite_options[@]}"
}

if [ -n "$device" ]; then
    echo "qpconform: running the suites on this host's device $device"
    python -m pytest --device "$device" "${suite_args[@]}"
    status=$?
else
    echo "qpconform: no RDMA device on this host: running against $vm_device in a VM"
    if ! command -v qemu-system-x86_64 >/dev/null || ! command -v mmdebstrap >/dev/null; then
        if [ "$(id -u)" -eq 0 ]; then
            qpconform vm --install-deps || exit 1
        fi
    fi
    vm_args=(--release "${QPCONFORM_RELEASE:-bookworm}" --driver "$driver"
             --timeout "${QPCONFORM_VM_TIMEOUT:-2400}")
    # workers of your own (-n, -p no:xdist): one part, inside, as you gave them
    if [ "${QPCONFORM_HOST_ENGINE:-$host_engine}" = 0 ] || [ -n "$user_xdist" ]; then
        qpconform vm "${vm_args[@]}" -- python3 -m pytest "${vm_devices[@]}" "${suite_args[@]}"
        status=$?
    else
        run_with_host_engine
        status=$?
    fi
fi

if ! qpconform report --input "$out" --output "$out" --allure "$out/allure-results"; then
    echo "qpconform: the report could not be built" >&2
    [ "$status" -eq 0 ] && status=1
fi
echo "qpconform: reports in $out/ (report.html, report.json, junit.xml, allure-results/, allure-report/index.html)"
exit "$status"
