"""The conformance suites: thin pytest files over the machines and the deterministic cases,
run against a device (`qpconform run --device NAME`, or pytest suites/ in the clone)."""
