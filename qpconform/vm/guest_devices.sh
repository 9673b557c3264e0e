# qpconform guest device setup, sourced by the guest init (qpconform/vm/guest_init.sh).
#
# Why a separate file on the control share: the driver under test changes from
# run to run, and the device setup must follow it without rebuilding the image.
# Set by config.sh: DRIVER (rxe or siw), DRIVER_MODULE (its module name) and
# DRIVER_KO (a .ko on the control share to load instead of the stock module,
# or empty).  Uses fail() of the init.  Writes $CTL/driver-loaded: what the
# kernel says it loaded (srcversion, taint), for the report's identity.

ip link set lo up
# virtio-serial ports to the host (qpconform/adapters/executor.py); harmless without any
modprobe -q virtio_console 2>/dev/null
modprobe -q veth 2>/dev/null
ip link add veth0 type veth peer name veth1 || fail "cannot create the veth pair"
ip addr add 192.0.2.1/24 dev veth0
ip addr add 192.0.2.2/24 dev veth1
ip link set veth0 up || fail "cannot bring veth0 up"
ip link set veth1 up || fail "cannot bring veth1 up"

if [ -n "$DRIVER_KO" ]; then
    [ -r "$DRIVER_KO" ] || fail "no module file $DRIVER_KO on the control share"
    for dep in $(modinfo -F depends "$DRIVER_KO" 2>/dev/null | tr ',' ' '); do
        modprobe "$dep" || fail "modprobe $dep (needed by $DRIVER_KO) failed"
    done
    if ! insmod "$DRIVER_KO" 2> /tmp/insmod.err; then
        fail "insmod $(basename "$DRIVER_KO") refused: $(cat /tmp/insmod.err); kernel says: $(dmesg | tail -n 3 | tr '\n' ' ')"
    fi
else
    modprobe "$DRIVER_MODULE" \
        || fail "modprobe $DRIVER_MODULE failed (the guest kernel has no stock $DRIVER; give --driver-src DIR or --module FILE.ko)"
fi

rdma link add "${DRIVER}0" type "$DRIVER" netdev veth0 || fail "rdma link add ${DRIVER}0 failed"
rdma link add "${DRIVER}1" type "$DRIVER" netdev veth1 || fail "rdma link add ${DRIVER}1 failed"

{
    echo "srcversion=$(cat /sys/module/$DRIVER_MODULE/srcversion 2>/dev/null)"
    echo "taint=$(cat /sys/module/$DRIVER_MODULE/taint 2>/dev/null)"
    echo "kernel_tainted=$(cat /proc/sys/kernel/tainted 2>/dev/null)"
} > "$CTL/driver-loaded"

if [ "$DRIVER" = siw ]; then
    # iWARP connects through rdma_cm, which resolves the peer's IP with ARP on the netdev
    # of the source address (veth0 -> 192.0.2.2).  Both ends are this host's addresses,
    # and Linux answers no ARP request whose sender is one of its own addresses
    # (accept_local=0): the resolution would time out (ADDR_ERROR).  Permanent neighbour
    # entries give each end the other's MAC; the TCP of the connection itself goes over lo.
    mac0=$(cat /sys/class/net/veth0/address 2>/dev/null)
    mac1=$(cat /sys/class/net/veth1/address 2>/dev/null)
    ip neigh replace 192.0.2.2 lladdr "$mac1" dev veth0 nud permanent \
        || fail "cannot add the neighbour entry of 192.0.2.2 on veth0"
    ip neigh replace 192.0.2.1 lladdr "$mac0" dev veth1 nud permanent \
        || fail "cannot add the neighbour entry of 192.0.2.1 on veth1"
fi
