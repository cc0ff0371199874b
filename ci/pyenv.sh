#!/usr/bin/env bash
# Print the path of the Python interpreter to use for MODE, creating an environment only when needed.
#   ci/pyenv.sh gate   the gate runner: the system python3 as is if it already has the runtime deps
#                      (a prepared GPU host has no internet), else .venv-gate with the project installed
#   ci/pyenv.sh test   the CPU test suite: .venv with a CPU torch, the project and its test extras,
#                      plus Debian's chromium for the browser test
# Progress goes to stderr; stdout carries only the interpreter path. PYTHON overrides the base interpreter.
set -euo pipefail

MODE=${1:-}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
TORCH_CPU=${TORCH_CPU:-2.13.0}  # a CPU wheel of this version lies on the CI machines' disk
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}  # overridable for the set-up tests only

log() { echo "pyenv[$MODE]: $*" >&2; }
die() { echo "pyenv[$MODE]: ERROR: $*" >&2; exit 1; }
pip_install() {  # pip_install VENV_PYTHON ARGS...: quiet pip, its output to stderr
  local py=$1; shift
  log "pip install $*"
  "$py" -m pip install --quiet "$@" >&2 || die "pip install $* failed (see pip's message above)${PIP_HINT:-}"
}
stamp_of() { echo "$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16) $*"; }

# Create (or reuse) the venv at $1 for stamp $2; installs run by the caller through "$VENV_PY".
venv_ready() {
  local venv=$1 want=$2
  VENV_PY=$venv/bin/python
  if [[ -x $VENV_PY ]] && "$VENV_PY" -c 'import sys' 2>/dev/null \
     && [[ "$(cat "$venv/.flashcore-stamp" 2>/dev/null)" == "$want" ]]; then
    return 0
  fi
  if ! [[ -x $VENV_PY ]] || ! "$VENV_PY" -c 'import sys' 2>/dev/null; then
    command -v "$PYTHON" >/dev/null || die "no base interpreter '$PYTHON' (set PYTHON=...)"
    log "creating $venv with $PYTHON"
    "$PYTHON" -m venv --clear "$venv" >&2 || die "'$PYTHON -m venv $venv' failed (is the venv module installed?)"
  fi
  return 1
}

setup_gate() {
  if "$PYTHON" -c 'import torch, yaml, jinja2, pytest, pytest_benchmark' 2>/dev/null; then
    log "using $PYTHON as is (it has torch, yaml, jinja2, pytest, pytest_benchmark)"
    command -v "$PYTHON"
    return
  fi
  log "$PYTHON lacks the gate runtime deps; setting up .venv-gate (needs PyPI)"
  PIP_HINT="; a GPU host without internet needs torch, pyyaml, jinja2, pytest, pytest-benchmark in $PYTHON"
  local want; want=$(stamp_of gate)
  if ! venv_ready "$ROOT/.venv-gate" "$want"; then
    (cd "$ROOT" && pip_install "$VENV_PY" -e '.[harness]')
    echo "$want" >"$ROOT/.venv-gate/.flashcore-stamp"
  fi
  echo "$VENV_PY"
}

setup_test() {
  local want; want=$(stamp_of "test torch==$TORCH_CPU")
  if venv_ready "$ROOT/.venv" "$want"; then
    log "reusing .venv (pyproject.toml unchanged)"
  else
    # torch first, pinned: a bare 'torch' from the project deps would pull a multi-GB CUDA build.
    pip_install "$VENV_PY" "torch==$TORCH_CPU"
    (cd "$ROOT" && pip_install "$VENV_PY" -e '.[test]')
    echo "$want" >"$ROOT/.venv/.flashcore-stamp"
  fi
  if [[ ! -x $CHROMIUM ]]; then
    local sudo=""
    [[ $(id -u) == 0 ]] || sudo=sudo
    log "installing Debian's chromium for the browser test"
    $sudo apt-get update >&2 || die "apt-get update failed"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >&2 || die "apt-get install chromium failed"
    [[ -x $CHROMIUM ]] || die "chromium installed but $CHROMIUM is missing"
  fi
  echo "$VENV_PY"
}

case $MODE in
  gate) setup_gate ;;
  test) setup_test ;;
  *) die "usage: ci/pyenv.sh gate|test (got '$MODE')" ;;
esac
