"""qpconform: conformance suite for the RDMA QP state machine."""
