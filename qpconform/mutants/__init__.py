"""Mutant drivers: small plausible bugs, to measure how many the gate catches (run.py)."""
