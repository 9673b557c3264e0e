"""Device adapters: the engine's device protocol (qpconform/engine/device.py) on real NICs.

- pyverbs_device.py: opens a device (caps, identity, the QP types it has) and makes
  its lone QPs; pyverbs_qp.py: one lone QP (create, modify, query, post, poll,
  events); pyverbs_select.py picks the device, port and GID; pyverbs_compat.py
  bridges pyverbs versions;
- pyverbs_pair.py: a connected pair of QPs (both ends, their CQs, MRs, receives);
- cm_connect.py: the rdma_cm connector iWARP pairs need (siw, irdma in iWARP mode);
  cm_pair.py: two QPs of its own connected by it (the probe, the self-tests);
- identity.py: the device's identity for reports (fw, driver, kernel, rdma-core);
- inflight.py: the verb in progress (a timeout names it) and the time spent in verbs;
- resources.py: every verbs object closed, newest first, also on errors and Ctrl-C.

Only these modules import pyverbs, and only when a device is used, so everything else
stays importable on a host without an RDMA stack.
"""
