#!/bin/sh
# qpconform guest init (PID 1 inside the SoftRoCE VM).
#
# Why a custom init: the VM exists only to run one command against a real
# rdma_rxe device, so a service manager would only add boot time.  The host
# (vm/runner.py) writes /run/qpconform/ctl/config.sh and command.sh on a 9p
# share; this script prepares the devices (devices.sh), runs the command with its output on
# the serial console, then writes the exit status and the kernel log back to
# the share and powers off.  PID 1 must never exit (the kernel would panic).
#
# Console markers parsed by the host (NONCE comes from the kernel command line):
#   QPCONFORM-BOOTED NONCE    root filesystem is up (boot watchdog stops)
#   QPCONFORM-EXIT NONCE RC   command finished with status RC
# Exit status 125 with a "qpconform-init:" message means setup failed.

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022

mount -t proc proc /proc 2>/dev/null
mount -t sysfs sysfs /sys 2>/dev/null
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts 2>/dev/null
mount -t tmpfs tmpfs /dev/shm 2>/dev/null
mount -t tmpfs tmpfs /run 2>/dev/null
mount -t tmpfs tmpfs /tmp 2>/dev/null
mount -o remount,rw / 2>/dev/null
# Keep routine kernel chatter off the console; the full log is saved anyway.
dmesg -n 1 2>/dev/null

NONCE=
MODULES_DISK=
for word in $(cat /proc/cmdline); do
    case "$word" in
        qpconform.nonce=*) NONCE=${word#qpconform.nonce=} ;;
        qpconform.modules=*) MODULES_DISK=${word#qpconform.modules=} ;;
    esac
done

echo "QPCONFORM-BOOTED $NONCE"

CTL=/run/qpconform/ctl
RC=125

power_off() {
    sync
    echo 1 > /proc/sys/kernel/sysrq
    echo o > /proc/sysrq-trigger
    while :; do sleep 60; done
}

finish() {
    # $1: exit status to report.
    if [ -d "$CTL" ] && mountpoint -q "$CTL"; then
        dmesg > "$CTL/kernel.log" 2>&1
        echo "$1" > "$CTL/status"
    fi
    echo "QPCONFORM-EXIT $NONCE $1"
    power_off
}

fail() {
    echo "qpconform-init: $*"
    if [ -d "$CTL" ] && mountpoint -q "$CTL"; then
        echo "$*" > "$CTL/setup-error"
    fi
    finish 125
}

if [ -n "$MODULES_DISK" ]; then
    mount -o ro "$MODULES_DISK" /lib/modules || fail "cannot mount module disk $MODULES_DISK"
fi

modprobe -q 9pnet_virtio 2>/dev/null
modprobe -q 9p 2>/dev/null
mkdir -p "$CTL"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 qpc_ctl "$CTL" \
    || fail "cannot mount the control share (9p)"
[ -r "$CTL/config.sh" ] || fail "no $CTL/config.sh"
# config.sh sets PROJECT_DIR, WORK_DIR, PYDEPS (0/1), GUEST_COLUMNS, DRIVER, DRIVER_MODULE, DRIVER_KO
. "$CTL/config.sh"

mkdir -p "$PROJECT_DIR"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none qpc_proj "$PROJECT_DIR" \
    || fail "cannot mount the project share at $PROJECT_DIR"
PYDEPS_DIR=/opt/qpconform/pydeps
if [ "$PYDEPS" = 1 ]; then
    mkdir -p "$PYDEPS_DIR"
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose qpc_pydeps "$PYDEPS_DIR" \
        || fail "cannot mount the Python dependency share"
    # Bytecode for the guest's Python, compiled once into the host's cache
    # (importing hypothesis/pytest from source costs ~30 s per process under TCG).
    TAG=$(python3 -c 'import sys; print(sys.implementation.cache_tag)')
    if [ ! -e "$PYDEPS_DIR/.compiled-$TAG" ]; then
        echo "qpconform-vm: compiling the Python dependencies for $TAG (once per cache)"
        python3 -m compileall -q -j 0 "$PYDEPS_DIR" > /dev/null 2>&1
        touch "$PYDEPS_DIR/.compiled-$TAG"
    fi
fi

# The devices (rxe0/rxe1 or siw0/siw1 on a veth pair; no network leaves the VM)
# come from devices.sh on the control share, so the driver under test can change
# without a new image.
[ -r "$CTL/devices.sh" ] || fail "no $CTL/devices.sh"
. "$CTL/devices.sh"

RDMA_CORE=$(dpkg-query -W -f '${Version}' rdma-core 2>/dev/null || echo unknown)
PYVER=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
echo "qpconform-vm: kernel $(uname -r), rdma-core $RDMA_CORE, python $PYVER, devices: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')"

if [ -n "$GUEST_COLUMNS" ]; then
    stty -F /dev/console cols "$GUEST_COLUMNS" 2>/dev/null
fi

cd "$WORK_DIR" || fail "cannot enter $WORK_DIR"
# command.sh (written by the host) exports the user's environment and execs COMMAND.
# PYTHONPATH: the project first, then the pip --target dir (--env PYTHONPATH=X prepends X).
env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root TERM=dumb LANG=C.UTF-8 QPCONFORM_IN_VM=1 \
    PYTHONPATH="$PROJECT_DIR:$PYDEPS_DIR" \
    /bin/sh "$CTL/command.sh" < /dev/null > /dev/console 2>&1
RC=$?
cd /
finish "$RC"
