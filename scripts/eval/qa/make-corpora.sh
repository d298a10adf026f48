#!/usr/bin/env bash
# Builds the document folders of the public QA collections (tests/data/eval/qa/README.md) into
# OUT (default ~/.cache/ragbox/qa-corpora): python-faq, postgresql and debian-reference, each from
# its pinned Debian package, each checked against its question file. Run `apt-get update` once on
# a fresh machine first.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/qa-corpora}"
mkdir -p "$out"
for script in python-faq postgresql debian-reference; do
  python3 "$here/$script.py" "$out"
done
echo "corpora in $out"
