#!/usr/bin/env bash
# Builds the large Office files of the ingest speed check (issue 31; development time, not CI;
# nothing here is committed):
#
#   scripts/make-big-office.sh OUT [PG_HTML_DIR]
#
#   OUT/docx/manual.docx  the 38 PostgreSQL 15 manual pages of scripts/qa/make_corpora.sh (default
#                         ~/.cache/ragbox/qa-corpora/postgresql), joined by pandoc into one Word file
#                         (~102,000 words; 267 pages as LibreOffice 7.4 lays it out:
#                         `soffice --headless --convert-to pdf`, then `pdfinfo`)
#   OUT/md/manual.md      the same pandoc source as markdown (the per-token baseline)
#   OUT/xlsx/orders.xlsx  100,000 rows x 7 columns (a date column, numbers, text), written by
#                         LibreOffice from OUT/csv/orders.csv (deterministic rows, seed 31)
#
# Needs pandoc, LibreOffice (soffice) and python3.
set -euo pipefail
out=${1:?usage: make-big-office.sh OUT [PG_HTML_DIR]}
pg=${2:-$HOME/.cache/ragbox/qa-corpora/postgresql}
[ -d "$pg" ] || { echo "no $pg: run scripts/qa/make_corpora.sh first" >&2; exit 2; }
rm -rf "$out" && mkdir -p "$out"/{docx,md,xlsx,csv}
pages=$(ls "$pg"/*.html | sort)
# shellcheck disable=SC2086
pandoc -f html -t gfm --wrap=none -o "$out/md/manual.md" $pages
pandoc -f gfm -t docx -o "$out/docx/manual.docx" "$out/md/manual.md"
python3 - "$out/csv/orders.csv" <<'PY'
import csv, datetime, random, sys
rng = random.Random(31)
depots = ["Rotterdam", "Antwerp", "Hamburg", "Lyon", "Milan", "Gdansk"]
items = ["pallet", "parcel", "crate", "drum", "roll cage"]
with open(sys.argv[1], "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["Order", "Date", "Depot", "Customer", "Item", "Quantity", "Amount (EUR)"])
    start = datetime.date(2023, 1, 1)
    for i in range(100_000):
        day = start + datetime.timedelta(days=rng.randrange(730))
        w.writerow([f"ORD-{i:06d}", day.isoformat(), rng.choice(depots), f"Customer {rng.randrange(5000):04d}",
                    rng.choice(items), rng.randrange(1, 60), f"{rng.uniform(10, 5000):.2f}"])
PY
profile=$(mktemp -d)
soffice "-env:UserInstallation=file://$profile" --headless --convert-to xlsx --outdir "$out/xlsx" "$out/csv/orders.csv" >/dev/null
rm -rf "$profile"
ls -l "$out"/*/*
