#!/usr/bin/env bash
# Build a folder of hostile inputs (plus a few good files) for ingest robustness tests.
#
#   scripts/make-bad-inputs.sh DIR
#
# DIR is deleted and re-created on every run (idempotent). To guard against a typo deleting the
# wrong folder, an existing DIR is only removed if it is empty or carries the marker file
# `.ragbox-bad-inputs` written by an earlier run. Prints nothing unless something fails.
# Needs bash, coreutils, awk; python3 only for the unix socket (skipped without it).
#
# What an ingest of DIR must do: finish (no hang, no crash, exit status "ok with skipped files"),
# ingest every GOOD file, and report each BAD one with its path and a reason, then carry on.
#
# GOOD (must be ingested; each holds a unique marker word "goodmarker-<name>" a test can search for):
#   good/handbook.md, good/notes.txt, good/page.html    plain good files
#   names/...                                           good content under odd names: spaces,
#       "Résumé – final.md" (UTF-8), a newline in the name, a leading "-", a ~200-byte name,
#       and a name that is not valid UTF-8 (byte 0xE9); these must be ingested too, and reported
#       with a lossy path if the name cannot be shown as UTF-8
#   invalid-utf8.md      valid markdown with invalid UTF-8 bytes in the middle: ingest the text
#                        lossily (U+FFFD) or skip it with a reason; both are defensible, a crash is not
#   huge.txt             50 MiB of numbered lines: ingested, or skipped as "too large" when a size
#                        limit is configured; either way in bounded memory
#
# BAD (skipped with a reason, never fatal):
#   empty.md, whitespace.txt          no content (nothing to chunk; not an error worth failing on)
#   binary.txt                        random bytes with NULs under a text extension
#   truncated.pdf                     the first half of the sample PDF (no xref, no trailer)
#   garbage.pdf                       random bytes; fake-header.pdf: "%PDF-1.7" then random bytes
#   dir.md/                           a directory with a file extension (holds good/-style content
#                                     in dir.md/inside.md, which IS a good file: goodmarker-inside)
#   loop-a.md -> loop-b.md -> loop-a.md   symlink loop (ELOOP on open)
#   dangling.md -> does-not-exist.md      dangling symlink (ENOENT on open)
#   sub/parent -> ..                  directory symlink to its parent: a walker that follows links
#                                     must detect the cycle (or not follow links at all)
#   fifo.txt                          a named pipe: open() blocks forever without a writer, so the
#                                     walker must check the file type (regular files only) first
#   socket.md                         a unix socket (open fails with ENXIO); needs python3
#   unreadable.md                     mode 000
#   noaccess/                         a directory with mode 000 holding noaccess/secret.md
#
# Running as root: root has CAP_DAC_OVERRIDE, so unreadable.md and noaccess/ ARE readable and will
# be ingested (noaccess/secret.md holds goodmarker-secret). A test must therefore only assert
# "reported as unreadable" for those two when `id -u` is not 0, and skip that assertion as root.
# The cases that fail the same way for root and for everyone else are the dangling symlink, the
# symlink loop, the FIFO, the socket and the directory named dir.md; use those for the
# "cannot read this entry" assertions that must hold in CI (which runs as root in a container).
set -euo pipefail

die() { echo "make-bad-inputs: error: $*" >&2; exit 1; }

[[ $# -eq 1 && -n "$1" ]] || die "usage: scripts/make-bad-inputs.sh DIR"
DIR="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SAMPLE_PDF="$ROOT/tests/data/corpus/plans/business-continuity-plan.pdf"
MARKER=".ragbox-bad-inputs"

[[ -f "$SAMPLE_PDF" ]] || die "sample PDF not found: $SAMPLE_PDF"

if [[ -e "$DIR" || -L "$DIR" ]]; then
  [[ -d "$DIR" && ! -L "$DIR" ]] || die "$DIR exists and is not a directory; not touching it"
  if [[ ! -e "$DIR/$MARKER" ]] && [[ -n "$(ls -A "$DIR")" ]]; then
    die "$DIR is not empty and was not made by this script (no $MARKER); not deleting it"
  fi
  # Mode-000 folders cannot be deleted by a non-root user until they are opened up again.
  # find does not follow symlinks (sub/parent -> ..), so this stays inside DIR.
  find "$DIR" -type d -exec chmod u+rwx {} + 2>/dev/null || true
  rm -rf -- "$DIR"
fi
mkdir -p -- "$DIR"
cd -- "$DIR"
: >"$MARKER"

# ----------------------------------------------------------------------------- good files
mkdir good
cat >good/handbook.md <<'MD'
# Staff handbook extract

## 1 Opening hours

The office opens at 08:00 and closes at 18:00 on working days. goodmarker-handbook

## 2 Visitors

Visitors sign in at reception and wear a badge at all times.
MD
cat >good/notes.txt <<'TXT'
Team notes, 3 June

1. The printer on the second floor is fixed.
2. The fire warden rota for June is on the notice board. goodmarker-notes
TXT
cat >good/page.html <<'HTML'
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Canteen menu</title>
<script>var tracking = "should not be indexed";</script></head>
<body><nav><a href="/">Home</a></nav>
<main><h1>Canteen menu</h1><p>Soup of the day is served from 11:30. goodmarker-page</p>
<ul><li>Monday: tomato soup</li><li>Tuesday: lentil soup</li></ul></main>
<footer>Intranet footer</footer></body></html>
HTML

# ----------------------------------------------------------------------------- odd names (good content)
mkdir names
good_md() { printf '# %s\n\nA small but valid document. goodmarker-%s\n' "$1" "$2"; }
good_md "Spaces" spaces >"names/with spaces in the name.md"
good_md "Résumé" resume >"names/Résumé – final.md"
good_md "Dash" dash >"names/-starts-with-dash.md"
long="long-$(printf 'x%.0s' $(seq 1 192)).md"   # 5 + 192 + 3 = 200 bytes (NAME_MAX is 255)
good_md "Long name" longname >"names/$long"
# A newline in the name (Linux allows any byte but '/' and NUL); skipped quietly if the
# filesystem refuses it.
good_md "Newline" newline >"names/line"$'\n'"break.md" 2>/dev/null || true
# A name that is not valid UTF-8 (Latin-1 "café"): Rust's Path::to_str() returns None for it.
good_md "Latin-1 name" latin1 >"names/caf"$'\xe9'".md" 2>/dev/null || true

# ----------------------------------------------------------------------------- empty and binary
: >empty.md
printf ' \t \n\n   \r\n\t\n' >whitespace.txt
{
  head -c 32768 /dev/urandom
  printf '\0\0\0\0binary\0\0\0\0'
  head -c 32768 /dev/urandom
} >binary.txt

# ----------------------------------------------------------------------------- invalid UTF-8
{
  printf '# Invalid UTF-8 in the middle\n\nThis paragraph is fine. goodmarker-invalidutf8\n\n'
  printf 'Here come bad bytes: \xff\xfe \xc3\x28 \xe2\x82 (a lone continuation \x80) and text resumes.\n\n'
  printf '## After the damage\n\nThis section is valid again and should still be searchable.\n'
} >invalid-utf8.md

# ----------------------------------------------------------------------------- huge file: 50 MiB
awk 'BEGIN {
  target = 50 * 1024 * 1024; n = 0; i = 0
  while (n < target) {
    i++
    line = sprintf("Line %08d: the quick brown fox jumps over the lazy dog near warehouse %d.\n", i, i % 97)
    printf "%s", line
    n += length(line)
  }
}' >huge.txt

# ----------------------------------------------------------------------------- broken PDFs
size=$(wc -c <"$SAMPLE_PDF")
head -c $((size / 2)) "$SAMPLE_PDF" >truncated.pdf
head -c 8192 /dev/urandom >garbage.pdf
{ printf '%%PDF-1.7\n%%\xe2\xe3\xcf\xd3\n'; head -c 8192 /dev/urandom; } >fake-header.pdf

# ----------------------------------------------------------------------------- entries that are not files
mkdir dir.md
good_md "Inside a folder named dir.md" inside >dir.md/inside.md
ln -s loop-b.md loop-a.md
ln -s loop-a.md loop-b.md
ln -s does-not-exist.md dangling.md
mkdir sub
good_md "Sub folder" sub >sub/child.md
ln -s .. sub/parent
mkfifo fifo.txt
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' socket.md
fi

# ----------------------------------------------------------------------------- permissions (see the root note above)
good_md "Unreadable" unreadable >unreadable.md
chmod 000 unreadable.md
mkdir noaccess
good_md "Secret" secret >noaccess/secret.md
chmod 000 noaccess
