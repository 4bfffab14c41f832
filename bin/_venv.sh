# Sourced by bin/run and bin/test: find Python 3.13, create .venv, install when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
find_python() {
  for cand in "${PYTHON:-}" python3.13 "$(command -v pyenv >/dev/null 2>&1 && pyenv prefix 3.13 2>/dev/null)/bin/python3.13" python3; do
    [ -n "$cand" ] || continue
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; raise SystemExit(sys.version_info[:2] != (3, 13))' 2>/dev/null; then
      command -v "$cand"; return 0
    fi
  done
  echo "Python 3.13 is required (set PYTHON=/path/to/python3.13)." >&2
  return 1
}
ensure_venv() {  # $1: extras, e.g. "dev" or ""
  local extras="$1" spec="." stamp want
  [ -n "$extras" ] && spec=".[$extras]"
  if [ ! -x .venv/bin/python ]; then
    "$(find_python)" -m venv .venv
  fi
  want="$( (cat pyproject.toml; echo "$extras") | sha256sum | cut -c1-16)"
  stamp=".venv/.installed-${want}"
  # An install with the dev extras holds everything the app needs: bin/run uses it as it is.
  if [ -z "$extras" ] && [ -f ".venv/.installed-$( (cat pyproject.toml; echo dev) | sha256sum | cut -c1-16)" ]; then
    return 0
  fi
  if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$spec"
    rm -f .venv/.installed-*; touch "$stamp"
  fi
}
