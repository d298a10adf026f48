#!/usr/bin/env bash
# Fetch the ingest benchmark corpora: the HTML documentation of Python and of Rust, from Debian
# packages, into ${RAGBOX_CACHE_DIR:-~/.cache/ragbox}/bench-corpora (never into the repository).
#
#   scripts/bench/fetch-corpora.sh [--dir DIR]
#
# Uses `apt-get download` (no root needed, nothing is installed) and `dpkg-deb -x`, one folder per
# package. Idempotent: a package already downloaded and extracted is left alone (a stamp file names
# the .deb it came from). For Python the first of python3.11-doc, python3.12-doc, python3.13-doc that
# apt knows is taken (python3-doc is only a dependency package without the HTML). If apt does not know
# a package, `apt-get update` is run once (as root) and the download retried.
#
# stdout: the two HTML folders, one per line (Python first, then Rust), for use as
#   scripts/bench/ingest-baseline.sh --data "$(scripts/bench/fetch-corpora.sh | head -1)"
# stderr: progress and a size summary. Needs apt-get and dpkg-deb (Debian/Ubuntu) and the network
# (deb.debian.org or a mirror) on first use only.
set -euo pipefail

DIR="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/bench-corpora"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR="${2:?--dir needs a value}"; shift 2 ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument: $1" >&2; exit 2 ;;
  esac
done

die() { echo "fetch-corpora: error: $*" >&2; exit 1; }
log() { echo "[fetch-corpora] $*" >&2; }

command -v apt-get >/dev/null || die "apt-get not found (a Debian or Ubuntu system is needed)"
command -v dpkg-deb >/dev/null || die "dpkg-deb not found"
mkdir -p "$DIR"
cd "$DIR"

UPDATED=0
known() { apt-cache show "$1" >/dev/null 2>&1; }
refresh_lists() {
  [[ "$UPDATED" == 0 ]] || return 0
  UPDATED=1
  if [[ "$(id -u)" == 0 ]]; then
    log "apt-get update"
    apt-get update -qq >&2 || true
  else
    log "package lists may be stale; run 'sudo apt-get update' if a download fails"
  fi
}

# fetch PKG: download and extract PKG into DIR/PKG unless already done.
fetch() {
  local pkg="$1" deb
  deb="$(ls -1 "${pkg}"_*.deb 2>/dev/null | sort -V | tail -n 1 || true)"
  if [[ -z "$deb" ]]; then
    log "downloading $pkg"
    # As root, apt warns that its _apt user cannot write here; the download works anyway.
    if ! apt-get download -q "$pkg" >/dev/null 2>"$pkg.download.log"; then
      refresh_lists
      apt-get download -q "$pkg" >/dev/null 2>"$pkg.download.log" ||
        { cat "$pkg.download.log" >&2; die "apt-get download $pkg failed"; }
    fi
    rm -f "$pkg.download.log"
    deb="$(ls -1 "${pkg}"_*.deb | sort -V | tail -n 1)"
  fi
  if [[ -f "$pkg/.extracted-from" && "$(cat "$pkg/.extracted-from")" == "$deb" ]]; then
    return 0
  fi
  log "extracting $deb into $DIR/$pkg"
  rm -rf "$pkg.tmp" "$pkg"
  mkdir "$pkg.tmp"
  dpkg-deb -x "$deb" "$pkg.tmp"
  printf '%s' "$deb" >"$pkg.tmp/.extracted-from"
  mv "$pkg.tmp" "$pkg"
}

PY_PKG=""
for cand in python3.11-doc python3.12-doc python3.13-doc; do
  if known "$cand" || [[ -f "$cand/.extracted-from" ]]; then
    PY_PKG="$cand"
    break
  fi
done
if [[ -z "$PY_PKG" ]]; then
  refresh_lists
  for cand in python3.11-doc python3.12-doc python3.13-doc; do
    if known "$cand"; then PY_PKG="$cand"; break; fi
  done
fi
[[ -n "$PY_PKG" ]] || die "apt knows none of python3.11-doc, python3.12-doc, python3.13-doc"

fetch "$PY_PKG"
fetch rust-doc

PY_HTML=""
for d in "$DIR/$PY_PKG"/usr/share/doc/python3.*/html; do
  case "$d" in
    */python3.*-doc/html) continue ;;  # the -doc package's own folder only links to the real one
  esac
  [[ -d "$d" && ! -L "$d" ]] && { PY_HTML="$d"; break; }
done
RUST_HTML="$DIR/rust-doc/usr/share/doc/rust-doc/html"
[[ -n "$PY_HTML" && -d "$PY_HTML" ]] || die "no usr/share/doc/python3.*/html in $DIR/$PY_PKG"
[[ -d "$RUST_HTML" ]] || die "no usr/share/doc/rust-doc/html in $DIR/rust-doc"

summary() {  # summary NAME DIR
  local html bytes
  html="$(find "$2" -type f \( -name '*.html' -o -name '*.htm' \) | wc -l)"
  bytes="$(find "$2" -type f \( -name '*.html' -o -name '*.htm' \) -printf '%s\n' | awk '{s += $1} END {print s + 0}')"
  log "$1: $2: $(find "$2" -type f | wc -l) files ($(du -sh "$2" | cut -f1)), of which $html HTML ($((bytes / 1000000)) MB)"
}
summary "$PY_PKG" "$PY_HTML"
summary rust-doc "$RUST_HTML"

printf '%s\n' "$PY_HTML" "$RUST_HTML"
