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
