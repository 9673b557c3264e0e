#!/usr/bin/env bash
# The self-tests: lint and the import layers, then the model and harness tests (no RDMA
# device needed).
# VM end-to-end tests run too when QPCONFORM_VM_TESTS=1 (CI sets it); =all adds the variants
# another CI phase covers (tests/test_vm_cm.py on bookworm: the siw phase).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bootstrap.sh
qpconform_bootstrap

echo "== ruff"
ruff check .
echo "== import layers (pyproject.toml [tool.importlinter])"
lint-imports --no-logo
echo "== self-tests"
python -m pytest tests/ "$@"
