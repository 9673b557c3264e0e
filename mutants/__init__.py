"""Mutant drivers: small plausible bugs, to measure how many the gate catches (mutants/run.py)."""
