"""Records of a run: divergences, reproducer scripts, run records and the qualification report."""
