#!/usr/bin/env bash
# Builds the patched crates that Cargo.toml's [patch.crates-io] points at (patches/candle-core,
# patches/mistralrs-core): each is the crates.io release, checked by sha256, with its
# patches/NAME-VERSION.patch applied (patches/README.md says what each change is and why). The
# copies are generated, not committed, and kept outside the checkout, like cargo's own sources:
# under $RAGBOX_CACHE_DIR/patched/NAME-VERSION-PATCHSHA, with patches/NAME a symbolic link to
# it. Run this before the first `cargo` command of a fresh clone (scripts/test.sh and the
# README's first command do).
#
#   scripts/setup/patch-crates.sh          make the copies (nothing to do when they are up to date)
#   scripts/setup/patch-crates.sh --save   after editing a copy: write its changes back to its .patch
#
# The release comes from $RAGBOX_CACHE_DIR/crates (kept between runs), cargo's own download cache,
# or crates.io. Every generated file gets one timestamp: the time of the last commit that changed
# its patch (now, when the patch has uncommitted changes). Cargo compares source times with its
# last build's: a fresh clone (CI, with target/ kept) then rebuilds nothing, and a changed patch is
# newer than any build made before it, so what it changes is rebuilt (build scripts included).
set -euo pipefail
cd "$(dirname "$0")/../.."

# name version sha256 of the .crate (crates.io's checksum, as in a Cargo.lock)
CRATES=(
  "candle-core 0.10.2 6bd9895436c1ba5dc1037a19935d084b838db066ff4e15ef7dded020b7c12a4a"
  "mistralrs-core 0.8.1 a2b8b9e5c94491d9ceeded3a30291cb6af6ae74810a5776dd55e3bbb8b3429d4"
)
CACHE="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/crates"
PATCHED="${RAGBOX_CACHE_DIR:-$HOME/.cache/ragbox}/patched"
SAVE=0
case "${1:-}" in
  --save) SAVE=1 ;;
  "") ;;
  *) echo "usage: scripts/setup/patch-crates.sh [--save]" >&2; exit 2 ;;
esac

sha() { sha256sum "$1" | cut -d' ' -f1; }

# Downloads $1 to $2 with curl, or Python where curl is missing.
download() {
  if command -v curl >/dev/null 2>&1; then
    curl -sSfL --retry 3 -o "$2" "$1"
  else
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$1" "$2"
  fi
}

# The verified .crate file of name $1, version $2, sha256 $3, printed as a path.
crate_file() {
  local name=$1 version=$2 want=$3 file="$CACHE/$1-$2.crate" found
  mkdir -p "$CACHE"
  if [ ! -f "$file" ] || [ "$(sha "$file")" != "$want" ]; then
    found=$(ls "$HOME"/.cargo/registry/cache/*/"$name-$version.crate" 2>/dev/null | head -1 || true)
    if [ -n "$found" ] && [ "$(sha "$found")" = "$want" ]; then
      cp "$found" "$file"
    else
      echo "downloading $name $version from crates.io" >&2
      download "https://static.crates.io/crates/$name/$name-$version.crate" "$file.part" || {
        echo "error: could not download $name $version; put $name-$version.crate in $CACHE (from any machine: https://static.crates.io/crates/$name/$name-$version.crate) and run this again" >&2
        exit 1
      }
      mv "$file.part" "$file"
    fi
  fi
  local got
  got=$(sha "$file")
  if [ "$got" != "$want" ]; then
    echo "error: $file has sha256 $got, not $want; delete it and run this again" >&2
    exit 1
  fi
  echo "$file"
}

# Points the link $2 (patches/NAME) at the generated copy $1; a copy left in the checkout by an
# older version of this script goes.
link_copy() {
  if [ "$(readlink "$2" 2>/dev/null)" != "$1" ]; then
    rm -rf "$2"
    ln -s "$1" "$2"
  fi
}

for entry in "${CRATES[@]}"; do
  read -r name version want <<<"$entry"
  patch="patches/$name-$version.patch"
  dest="patches/$name"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  tar -xzf "$(crate_file "$name" "$version" "$want")" -C "$work"
  if [ "$SAVE" = 1 ]; then
    [ -d "$dest" ] || { echo "error: $dest does not exist; run scripts/setup/patch-crates.sh first" >&2; exit 1; }
    mv "$work/$name-$version" "$work/a"
    cp -rL "$dest" "$work/b"
    rm -f "$work/b/.ragbox-patch"
    # diff exits 1 when the trees differ.
    (cd "$work" && diff -ruN a b | sed -E 's/^((\+\+\+|---) [^\t]*)\t.*/\1/' > "$OLDPWD/$patch") || true
    echo "$patch: $(grep -c '^[-+][^-+]' "$patch") changed lines" >&2
  else
    key="$want $(sha "$patch")"
    copy="$PATCHED/$name-$version-$(sha "$patch" | cut -c1-16)"
    if [ -f "$copy/.ragbox-patch" ] && [ "$(cat "$copy/.ragbox-patch")" = "$key" ]; then
      link_copy "$copy" "$dest"
      rm -rf "$work"
      continue
    fi
    (cd "$work/$name-$version" && git apply -p1 "$OLDPWD/$patch") || {
      echo "error: $patch does not apply to $name $version" >&2
      exit 1
    }
    echo "$key" > "$work/$name-$version/.ragbox-patch"
    stamp=$(git log -1 --format=%ct -- "$patch" 2>/dev/null || true)
    if [ -z "$stamp" ] || ! git diff --quiet HEAD -- "$patch" 2>/dev/null; then
      stamp=$(date +%s)
    fi
    find "$work/$name-$version" -exec touch -h -d "@$stamp" {} +
    mkdir -p "$PATCHED"
    rm -rf "$copy"
    mv "$work/$name-$version" "$copy"
    link_copy "$copy" "$dest"
    echo "made $copy ($dest): $name $version with $patch" >&2
  fi
  rm -rf "$work"
done
