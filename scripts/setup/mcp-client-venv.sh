#!/usr/bin/env bash
# The MCP client of the MCP tests: the protocol's official Python SDK (PyPI `mcp`, pinned) in a
# venv under the ragbox cache, made once (seconds after). Prints the venv's python.
#
#   MCP_PYTHON="$(scripts/setup/mcp-client-venv.sh)"
set -euo pipefail
VENV="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/mcp-venv"
PIN="mcp==2.3.0"
if ! "$VENV/bin/python" -c 'import mcp' >/dev/null 2>&1 || [ "$(cat "$VENV/.pin" 2>/dev/null)" != "$PIN" ]; then
  echo "[mcp-client-venv] installing $PIN into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "$PIN" >&2
  echo "$PIN" > "$VENV/.pin"
fi
echo "$VENV/bin/python"
