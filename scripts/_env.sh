# Sourced by the scripts: creates .venv and installs the project with its
# development extras, once per change of pyproject.toml, setup.py or the
# compiled record decoder's C source.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "gengroup needs Python >= 3.11 (found: $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# The stamp covers the build inputs: the metadata and the compiled decoder's source.
stamp=".venv/.installed-$(cat pyproject.toml setup.py gengroup/protocol/_speedups.c |
  sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "installing gengroup and its development dependencies into .venv ..." >&2
  if ! { .venv/bin/python -m pip install -q --upgrade pip &&
         .venv/bin/python -m pip install -q -e '.[dev]'; } > .venv/install.log 2>&1; then
    cat .venv/install.log >&2
    echo "installation failed (log above)" >&2
    exit 1
  fi
  rm -f .venv/.installed-*
  touch "$stamp"
fi
