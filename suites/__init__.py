"""The conformance suites: thin pytest files over the machines and the deterministic cases,
run against a device (`qpconform run --device NAME`, or pytest suites/ in the clone).

The deterministic cases come from cases.py (the edge values of the attribute suite from
boundaries.py) and run through steps.py; none of the three holds tests."""
