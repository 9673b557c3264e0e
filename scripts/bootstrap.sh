# Sourced by the other scripts: a virtualenv with qpconform and its tools, from nothing.
# Debian packages are installed when missing and we are root; otherwise we say which.
# The venv sees system site-packages so a distribution pyverbs (python3-pyverbs) is importable.

qpconform_need_apt() {
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "qpconform: missing Debian packages: ${missing[*]}" >&2
        echo "qpconform: install them with: sudo apt-get install -y ${missing[*]}" >&2
        return 1
    fi
    echo "qpconform: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

qpconform_bootstrap() {
    if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        qpconform_need_apt python3 python3-venv python3-pip || return 1
    fi
    if [ ! -x .venv/bin/python ]; then
        python3 -m venv --system-site-packages .venv || return 1
    fi
    # shellcheck disable=SC1091
    . .venv/bin/activate
    python -m pip install --quiet --disable-pip-version-check -e '.[dev]' || return 1
}

# Allure 3 (npm package `allure`, pinned: reports/allure_render.py ALLURE_VERSION) in .allure/,
# which renders the Allure report of a run. Never fatal: without it (no node/npm, or npm cannot
# reach its registry) `qpconform report --allure` says in report.html and on the terminal why
# there is no Allure report, and the run goes on.
QPCONFORM_ALLURE_VERSION=3.18.0
qpconform_allure() {
    local bin=.allure/node_modules/.bin/allure
    if [ -x "$bin" ] && [ "$(cat .allure/version 2>/dev/null)" = "$QPCONFORM_ALLURE_VERSION" ]; then
        return 0
    fi
    if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
        qpconform_need_apt nodejs npm >/dev/null 2>&1 || true
    fi
    if ! command -v npm >/dev/null; then
        echo "qpconform: npm is missing: the Allure report will not be rendered (install nodejs and npm)" >&2
        return 0
    fi
    echo "qpconform: installing Allure $QPCONFORM_ALLURE_VERSION into .allure/ (npm)" >&2
    mkdir -p .allure
    if timeout 300 npm install --prefix .allure --no-audit --no-fund --loglevel=error \
        --fetch-retries=0 --fetch-timeout=20000 "allure@$QPCONFORM_ALLURE_VERSION" \
        >.allure/npm.log 2>&1 && [ -x "$bin" ]; then
        echo "$QPCONFORM_ALLURE_VERSION" > .allure/version
    else
        echo "qpconform: npm could not install allure@$QPCONFORM_ALLURE_VERSION ($(grep -m1 -o 'reason: .*' .allure/npm.log || tail -n 1 .allure/npm.log)): the Allure report will not be rendered (npm's log: .allure/npm.log)" >&2
    fi
    return 0
}
