"""Device adapters: the engine's device protocol (qpconform/engine/device.py) on real NICs.

- pyverbs_device.py: opens a device (caps, identity, the QP types it has) and makes
  its lone QPs; pyverbs_qp.py: one lone QP (create, modify, query, post, poll,
  events); pyverbs_sets.py: its Context, PD, MR and CQs, and the pool that lends them
  again; pyverbs_shared_cq.py: a bystander QP on another QP's CQs; pyverbs_select.py
  picks the device, port and GID; pyverbs_compat.py bridges pyverbs versions;
- pyverbs_pair.py: a connected pair of QPs (both ends, their CQs, MRs, receives);
- cm_connect.py: the rdma_cm connector iWARP pairs need (siw, irdma in iWARP mode);
  cm_pair.py: two QPs of its own connected by it (the probe, the self-tests);
- identity.py: the device's identity for reports (fw, driver, kernel, rdma-core);
- inflight.py: the verb in progress (a timeout names it) and the time spent in verbs;
- resources.py: every verbs object closed, newest first, also on errors and Ctrl-C;
- leaks.py: the kernel's object counts before and after a run (the plugin's check, and
  the guest executor's at its end);
- plain_loop.py: modify_qp calls/s on one QP, nothing checked (the device's ceiling);
- executor.py, wire.py, remote_device.py: the device served by an executor in a guest
  to an engine on the host (one round trip a step); executor_ports.py: the virtio-serial
  ports the executor serves on;

Only these modules import pyverbs, and only when a device is used, so everything else
stays importable on a host without an RDMA stack.
"""
