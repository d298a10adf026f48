#!/usr/bin/env bash
# Makes the patched crates ragbox builds with (patches/README.md says what each patch is for):
# each is the crates.io release, checked by sha256, with the series patches/NAME-VERSION/*.patch
# applied in order. The copies are generated, not committed, and kept outside the checkout, like
# cargo's own sources: $RAGBOX_CACHE_DIR/patched/NAME-VERSION-KEY. Cargo finds them through
# .cargo/patched.toml (written here, ignored by git), which .cargo/config.toml includes and whose
# [patch.crates-io] takes precedence over Cargo.toml's. Cargo.toml's own [patch] points at the
# committed placeholders (patches/placeholders/NAME): the same manifest as the patched copy, and a
# library that stops the build with the command to run. So in a fresh clone the first cargo
# command resolves the same lock file and, at the patched crate, says to run this script.
#
#   scripts/setup/patch-crates.sh          make the copies (nothing to do when they are up to date)
#   scripts/setup/patch-crates.sh --save   after editing a copy: write its changes back to the last
#                                          patch of its series (the earlier ones stay as they are)
#
# The release comes from $RAGBOX_CACHE_DIR/crates (kept between runs), cargo's own download cache,
# or crates.io. Every generated file gets one timestamp: the time of the last commit that changed
# its series (now, when the series has uncommitted changes). Cargo compares source times with its
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
CONFIG=.cargo/patched.toml
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
    found=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$name-$version.crate" 2>/dev/null | head -1 || true)
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

# The placeholder's manifest for the patched copy's manifest $1: the same package, features and
# dependencies (so the lock file resolves the same), no build script, no targets but the library.
placeholder_manifest() {
  awk '
    /^\[\[(bench|test|example|bin)\]\]/ { skip = 1; next }
    /^\[/ { skip = 0 }
    skip { next }
    /^build = / { print "build = false"; next }
    { print }
  ' "$1"
}

# Writes the placeholder of crate $1 (version $2) from the copy $3; says so when it changed (the
# change belongs in the commit that changed the series).
write_placeholder() {
  local name=$1 version=$2 copy=$3 dir="patches/placeholders/$1"
  mkdir -p "$dir/src"
  local manifest
  manifest=$(placeholder_manifest "$copy/Cargo.toml")
  if [ "$(cat "$dir/Cargo.toml" 2>/dev/null)" != "$manifest" ]; then
    printf '%s\n' "$manifest" > "$dir/Cargo.toml"
    echo "updated $dir/Cargo.toml from the patched copy; commit it with the series" >&2
  fi
  local lib="compile_error!(\"$name $version is built from the patched copy that scripts/setup/patch-crates.sh makes (patches/README.md): run scripts/setup/patch-crates.sh once, then build again\");"
  if [ "$(cat "$dir/src/lib.rs" 2>/dev/null)" != "$lib" ]; then
    printf '%s\n' "$lib" > "$dir/src/lib.rs"
  fi
}

config_lines=()
for entry in "${CRATES[@]}"; do
  read -r name version want <<<"$entry"
  series_dir="patches/$name-$version"
  mapfile -t series < <(ls "$series_dir"/*.patch | sort)
  [ "${#series[@]}" -gt 0 ] || { echo "error: no patches in $series_dir" >&2; exit 1; }
  series_sha=$(cat "${series[@]}" | sha256sum | cut -d' ' -f1)
  key="$want $series_sha"
  copy="$PATCHED/$name-$version-$(printf '%s' "$key" | sha256sum | cut -c1-16)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if [ "$SAVE" = 1 ]; then
    current=$(sed -n "s|^$name = { path = \"\(.*\)\" }$|\1|p" "$CONFIG" 2>/dev/null || true)
    [ -d "$current" ] || { echo "error: no patched copy of $name in $CONFIG; run scripts/setup/patch-crates.sh first" >&2; exit 1; }
    tar -xzf "$(crate_file "$name" "$version" "$want")" -C "$work"
    mv "$work/$name-$version" "$work/a"
    last="${series[${#series[@]}-1]}"
    for p in "${series[@]}"; do
      [ "$p" = "$last" ] || (cd "$work/a" && git apply -p1 "$OLDPWD/$p")
    done
    cp -r "$current" "$work/b"
    rm -f "$work/b/.ragbox-patch"
    # diff exits 1 when the trees differ.
    (cd "$work" && diff -ruN a b | sed -E 's/^((\+\+\+|---) [^\t]*)\t.*/\1/' > "$OLDPWD/$last") || true
    echo "$last: $(grep -c '^[-+][^-+]' "$last") changed lines" >&2
    rm -rf "$work"
    continue
  fi
  if ! [ -f "$copy/.ragbox-patch" ] || [ "$(cat "$copy/.ragbox-patch")" != "$key" ]; then
    tar -xzf "$(crate_file "$name" "$version" "$want")" -C "$work"
    for p in "${series[@]}"; do
      (cd "$work/$name-$version" && git apply -p1 "$OLDPWD/$p") || {
        echo "error: $p does not apply to $name $version (after the patches before it)" >&2
        exit 1
      }
    done
    echo "$key" > "$work/$name-$version/.ragbox-patch"
    stamp=$(git log -1 --format=%ct -- "$series_dir" 2>/dev/null || true)
    if [ -z "$stamp" ] || ! git diff --quiet HEAD -- "$series_dir" 2>/dev/null || [ -n "$(git ls-files --others --exclude-standard -- "$series_dir" 2>/dev/null)" ]; then
      stamp=$(date +%s)
    fi
    find "$work/$name-$version" -exec touch -h -d "@$stamp" {} +
    mkdir -p "$PATCHED"
    rm -rf "$copy"
    mv "$work/$name-$version" "$copy"
    echo "made $copy: $name $version with ${#series[@]} patch(es) of $series_dir" >&2
  fi
  rm -rf "$work"
  write_placeholder "$name" "$version" "$copy"
  config_lines+=("$name = { path = \"$copy\" }")
  # Links an older version of this script made in the checkout.
  if [ -L "patches/$name" ]; then rm -f "patches/$name"; fi
done

if [ "$SAVE" = 0 ]; then
  text=$(printf '# Written by scripts/setup/patch-crates.sh (ignored by git): the patched crates.\n[patch.crates-io]\n'; printf '%s\n' "${config_lines[@]}")
  if [ "$(cat "$CONFIG" 2>/dev/null)" != "$text" ]; then
    printf '%s\n' "$text" > "$CONFIG"
  fi
fi
