# Sourced by bin/run and bin/test: find Python 3.13, create .venv, install the lock when it changed.
# The ranges in pyproject.toml are the policy; requirements/*.lock (bin/lock writes them) pin every
# package with its hashes, so every clone installs the same tree (docs/operations.md, "Dependencies").
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
lock_stamp() {  # $1: lock file; the marker an install of exactly that lock leaves in .venv
  echo ".venv/.installed-$(sha256sum "$1" | cut -c1-16)"
}
ensure_venv() {  # $1: "dev" (app, dev tools and benchmarks) or "app"
  local lock="requirements/$1.lock" stamp
  if [ ! -x .venv/bin/python ]; then
    "$(find_python)" -m venv .venv
  fi
  stamp="$(lock_stamp "$lock")"
  # The dev lock holds the app lock's exact pins and more: bin/run uses a dev install as it is.
  if [ "$1" = "app" ] && [ -f "$(lock_stamp requirements/dev.lock)" ]; then
    return 0
  fi
  if [ ! -f "$stamp" ]; then
    echo "Installing $lock into .venv ..." >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r "$lock"
    # Packages a previous lock brought and this one does not list are removed, so .venv is the lock.
    local strays
    strays="$(.venv/bin/python - "$lock" <<'PY'
import re, sys
from importlib import metadata
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
locked = {norm(m.group(1)) for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", open(sys.argv[1]).read(), re.M)}
keep = locked | {"pip"}
print(" ".join(sorted({d.metadata["Name"] for d in metadata.distributions() if norm(d.metadata["Name"]) not in keep})))
PY
)"
    if [ -n "$strays" ]; then
      # shellcheck disable=SC2086  # names, one per word
      .venv/bin/python -m pip uninstall --quiet --disable-pip-version-check -y $strays
    fi
    .venv/bin/python -m pip check --disable-pip-version-check >/dev/null
    rm -f .venv/.installed-*; touch "$stamp"
  fi
}
