#!/usr/bin/env bash
# The self-tests: lint and the import layers, then the model and harness tests (no RDMA
# device needed).
#
#   scripts/test.sh [PYTEST OPTIONS]          the everyday loop (under 5 minutes on 2 cores):
#                                             every core, the `dev` Hypothesis example counts,
#                                             the tests marked `slow` left to CI
#   scripts/test.sh --full [PYTEST OPTIONS]   CI's set: the full example counts (derandomized)
#                                             and the `slow` tests too
#
# One process, to debug a test with pdb or prints: -n 0 (or QPCONFORM_TEST_WORKERS=0).
# Your own -m replaces the `not slow` selection. The tests that boot the VM (marker `vm`) run
# only when QPCONFORM_VM_TESTS=1 (CI sets it); =all adds the variants another CI phase covers.
set -euo pipefail
cd "$(dirname "$0")/.."
full=""
if [ "${1:-}" = "--full" ]; then
    full=1
    shift
fi
. scripts/bootstrap.sh
qpconform_bootstrap
qpconform_allure  # for the browser test of the rendered Allure report (it skips, saying why, without)

echo "== ruff"
ruff check .
echo "== import layers (pyproject.toml [tool.importlinter])"
lint-imports --no-logo

options=()
user_workers="" user_marks=""
for arg in "$@"; do
    case "$arg" in
        -n|-n*|--numprocesses|--numprocesses=*|no:xdist) user_workers=1 ;;
        -m|-m*) user_marks=1 ;;
    esac
done
[ -z "$user_workers" ] && options+=(-n "${QPCONFORM_TEST_WORKERS:-auto}")
if [ -n "$full" ]; then
    export QPCONFORM_TEST_EXAMPLES=full
else
    export QPCONFORM_TEST_EXAMPLES="${QPCONFORM_TEST_EXAMPLES:-dev}"
    [ -z "$user_marks" ] && options+=(-m "not slow")
fi

echo "== self-tests (${QPCONFORM_TEST_EXAMPLES} example counts${full:+, slow tests included})"
status=0
python -m pytest tests/ "${options[@]}" "$@" || status=$?
if [ -z "$full" ]; then
    echo "qpconform: this was the everyday set (dev example counts, slow tests deselected);" \
         "CI runs the full set: scripts/test.sh --full"
fi
exit "$status"
