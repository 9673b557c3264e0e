"""SoftRoCE QEMU runner: runs a command in a VM that has real rxe0/rxe1 devices.

Runs on the host; never imports pyverbs.  Entry point: ``qpconform vm``.
"""
