# Shared set-up for scripts/serve.sh and scripts/test.sh (sourced, not run):
# a virtual environment in ./.venv with Odradek installed editable plus the given extras.
odradek_setup() {
  local extras=$1
  local py=${PYTHON:-python3}
  if [ ! -x .venv/bin/python ]; then
    "$py" -m venv .venv
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extras}]"
  # byte-code for Odradek's own modules, as installing a wheel writes it: an editable install
  # leaves none, and with PYTHONDONTWRITEBYTECODE every broker start compiled ~200 modules (0.5 s)
  .venv/bin/python -m compileall -q src/odradek >/dev/null
}

# apt_install PKG...: install Debian packages that are missing (needs root or sudo)
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}
