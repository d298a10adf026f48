#!/usr/bin/env bash
# Build the Office / e-book / scanned-page test fixtures with real tools (development time, not CI;
# the outputs are committed).
#
#   scripts/make-office-fixtures.sh
#
# Writes three folders, each deleted and re-created on every run (idempotent):
#
#   tests/data/corpus-office/  the sample corpus tests/data/corpus/ in Office and e-book formats: same
#                              folder layout and file stems, same text (checked word by word below)
#       policies/travel-and-expenses.docx                  pandoc (markdown -> docx)
#       policies/information-security-acceptable-use.docx  pandoc docx, then re-saved by LibreOffice
#                                                          (so one docx is LibreOffice-written)
#       policies/data-retention-and-privacy.odt            pandoc (markdown -> odt)
#       policies/remote-work-and-equipment.epub            pandoc, one chapter per "##" section
#       meetings/2024-04-09-it-steering-committee.docx     txt -> markdown (below) -> pandoc docx
#       meetings/2024-05-21-operations-weekly.rtf          txt -> markdown -> pandoc odt -> LibreOffice rtf
#       intranet/it-service-desk.odt                       the page's <main> -> LibreOffice Writer (HTML import)
#       email/*, plans/*.pdf, tools/*.py, QUESTIONS.md, .ragboxignore: copied unchanged
#     and two extra folders (extra copies of corpus content, so some answers appear twice):
#       tables/policy-tables.xlsx, tables/policy-tables.ods  the data tables of the policies, a sheet
#           per table, header row first: "Hotel caps" and "Approval limits" (travel-and-expenses.md,
#           sections 4 and 6), "Retention schedule" (data-retention-and-privacy.md, section 3),
#           "Standard kit" (remote-work-and-equipment.md, section 3.1), and "Sources" (where each sheet
#           came from, the policy's effective date as a date cell, a COUNTA formula per sheet and a
#           SUM total). Written as flat ODF (FODS) here, converted by LibreOffice.
#       tables/retention-schedule.csv                   the "Retention schedule" sheet, LibreOffice CSV export
#       slides/information-security-acceptable-use.pptx  pandoc: a title slide and 4 slides quoting
#           sections 3, 4, 6 (table) and 8 of the security policy verbatim, with speaker notes
#       slides/information-security-acceptable-use.odp   LibreOffice, from the pptx
#   tests/data/office/         one-concept unit fixtures from tiny markdown written here; what each
#                              holds is in tests/data/office/EXPECTED.md (written below, then checked)
#   tests/data/scanned/        tests/data/corpus/plans/business-continuity-plan.pdf as a scan: every page
#                              rendered at 200 dpi grey, wrapped as an image-only PDF, plus pdftotext
#                              ground truth; pages 1-2 as a bilevel multi-page TIFF (CCITT Group 4)
#                              and as a PDF of that Group 4 data
#
# Needs: pandoc, LibreOffice (soffice, with python3-uno), poppler-utils (pdftoppm, pdftotext, pdfinfo,
# pdfimages), img2pdf, libtiff-tools (tiffcp, tiffinfo, tiff2pdf), unzip, and /usr/bin/python3 with the uno and PIL modules (python3-uno;
# python3-pil comes with img2pdf). ImageMagick is not needed (PIL writes the grey PNG and JPEG).
#
# Reproducibility: SOURCE_DATE_EPOCH is fixed below, and the document dates inside the files follow it.
# Byte-identical from run to run (same tool versions): the docx files pandoc writes itself
# (travel-and-expenses, the steering-committee minutes, headings-lists-table), everything in
# tests/data/scanned/ and the CSV/TSV files.
# NOT byte-reproducible (same text, different bytes): pandoc 2.17 stamps (some of) the zip entries of
# .odt, .pptx and .epub with the wall clock (only its docx writer uses SOURCE_DATE_EPOCH throughout);
# everything LibreOffice writes carries wall-clock zip times and/or random ids or a font table in
# varying order (.rtf .doc .xls .ppt .xlsx .ods .odp, the intranet .odt, the re-saved docx files);
# encrypted.docx also has a random salt.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=$ROOT/tests/data/corpus
CORPUS=$ROOT/tests/data/corpus-office
OFFICE=$ROOT/tests/data/office
SCANNED=$ROOT/tests/data/scanned
PY=/usr/bin/python3   # the system Python: python3-uno and python3-pil live there

export SOURCE_DATE_EPOCH=1717200000   # 2024-06-01T00:00:00Z
export TZ=UTC LC_ALL=C.UTF-8

die() { echo "make-office-fixtures: $*" >&2; exit 1; }

for tool in pandoc soffice pdftoppm pdftotext pdfinfo pdfimages img2pdf tiffcp tiffinfo tiff2pdf unzip; do
  command -v "$tool" >/dev/null || die "needs $tool"
done
"$PY" -c 'import uno, PIL' 2>/dev/null || die "needs $PY with the uno and PIL modules (python3-uno, python3-pil)"
[ -f "$SRC/policies/travel-and-expenses.md" ] || die "sample corpus not found at $SRC"

WORK=$(mktemp -d)
SOFFICE_PID=
stop_listener() {  # the LibreOffice started below for encrypted.docx (oosplash and its soffice.bin)
  if [ -n "$SOFFICE_PID" ]; then
    kill $(pgrep -P "$SOFFICE_PID") "$SOFFICE_PID" 2>/dev/null || true
    wait "$SOFFICE_PID" 2>/dev/null || true
    SOFFICE_PID=
  fi
}
cleanup() {
  stop_listener
  rm -rf "$WORK"
}
trap cleanup EXIT

# A private LibreOffice profile: does not disturb (or get answered by) a LibreOffice already running.
# One setting differs from the defaults: no preview bitmap in PowerPoint 97 files (Tools > Options >
# Load/Save > Microsoft Office), which would make legacy.ppt about 0.5 MB instead of 25 KB.
LO_PROFILE=file://$WORK/lo-profile
mkdir -p "$WORK/lo-profile/user"
cat >"$WORK/lo-profile/user/registrymodifications.xcu" <<'XCU'
<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Common/Filter/Microsoft/Export"><prop oor:name="EnablePowerPointPreview" oor:op="fuse"><value>false</value></prop></item>
</oor:items>
XCU

# lo FORMAT[:FILTER[:OPTIONS]] OUTDIR INPUT [INFILTER]: convert one file with LibreOffice.
lo() {
  local fmt=$1 outdir=$2 input=$3 infilter=${4:-} log=$WORK/soffice.log
  local args=(-env:UserInstallation="$LO_PROFILE" --headless --norestore)
  [ -n "$infilter" ] && args+=(--infilter="$infilter")
  mkdir -p "$outdir"
  soffice "${args[@]}" --convert-to "$fmt" --outdir "$outdir" "$input" >"$log" 2>&1 \
    || { cat "$log" >&2; die "soffice failed on $input"; }
  if grep -qi '^error' "$log"; then cat "$log" >&2; die "soffice failed on $input"; fi
}

# pd ARGS...: pandoc with the source's punctuation kept as is (no curly quotes or dashes).
pd() { pandoc --fail-if-warnings "$@"; }

# ---------------------------------------------------------------------------------------------
# Python helpers (run with the system Python).
cat >"$WORK/fx.py" <<'PY'
import html, os, re, sys, time, zipfile
from xml.sax.saxutils import escape, quoteattr

# --- meeting notes (plain text) -> pandoc markdown --------------------------------------------
# Underlined titles become headings (=== level 1, --- and ~~~ level 2; with no === the first line is
# the title), wrapped paragraphs are joined, "Key: value" blocks keep one line each (a line block),
# indented "1." / "a)" lines become lists, and a fixed-width table (a row of dash runs under the
# header) becomes a pipe table. Every punctuation character is escaped, so no other markdown happens.
PUNCT = re.compile(r'([!-/:-@\[-`{-~])')
UNDER = re.compile(r'^\s*([=~-])\1{2,}\s*$')
RULE = re.compile(r'^\s*-{2,}(\s+-{2,})+\s*$')
KEYVAL = re.compile(r'^[A-Z][A-Za-z ]{0,20}:\s')
ITEM = re.compile(r'^\s+(\d+\.|[a-z]\))\s')

def esc(s):
    return PUNCT.sub(r'\\\1', s)

def txt2md(text):
    blocks, cur = [], []
    for line in text.splitlines():
        if line.strip():
            cur.append(line.rstrip())
        elif cur:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    has_title = any(UNDER.match(l) and l.strip()[0] == '=' for b in blocks for l in b[1:])
    out = []
    for n, block in enumerate(blocks):
        if n == 0 and not has_title:      # the title, then its subtitle lines one per line
            out.append('# ' + esc(block[0].strip()))
            if len(block) > 1:
                out.append('\n'.join('| ' + esc(l.strip()) for l in block[1:]))
            continue
        u = next((i for i, l in enumerate(block) if i and UNDER.match(l)), None)
        if u is not None:
            if u > 1:
                out.append('\n'.join('| ' + esc(l.strip()) for l in block[:u - 1]))
            level = 1 if block[u].strip()[0] == '=' else 2
            out.append('#' * level + ' ' + esc(block[u - 1].strip()))
            block = block[u + 1:]
        if not block:
            continue
        r = next((i for i, l in enumerate(block) if i and RULE.match(l)), None)
        if r is not None:
            starts = [m.start() for m in re.finditer(r'-{2,}', block[r])]
            def cells(line):
                return [esc(line[a:b].strip()) for a, b in zip(starts, starts[1:] + [None])]
            rows = [cells(block[r - 1])] + [cells(l) for l in block[r + 1:]]
            out.append('\n'.join(['| ' + ' | '.join(rows[0]) + ' |', '|' + '---|' * len(starts)]
                                 + ['| ' + ' | '.join(row) + ' |' for row in rows[1:]]))
        elif any(ITEM.match(l) for l in block):
            items, lead = [], []
            for l in block:
                m = ITEM.match(l)
                if m:
                    items.append([m.group(1), l[m.end():].strip()])
                elif items:
                    items[-1][1] += ' ' + l.strip()
                else:
                    lead.append(l.strip())
            if lead:
                out.append(esc(' '.join(lead)))
            out.append('\n'.join(f'{mark} {esc(t)}' for mark, t in items))
        elif len(block) > 1 and KEYVAL.match(block[0]) and sum(bool(KEYVAL.match(l)) for l in block) > 1:
            lines = []
            for l in block:
                if KEYVAL.match(l) or not lines:
                    lines.append(l.strip())
                else:
                    lines[-1] += ' ' + l.strip()
            out.append('\n'.join('| ' + esc(' '.join(l.split())) for l in lines))
        else:
            out.append(esc(' '.join(l.strip() for l in block)))
    return '\n\n'.join(out) + '\n'

# --- spreadsheets: flat ODF (FODS), converted by LibreOffice -----------------------------------
FODS_HEAD = '''<?xml version="1.0" encoding="UTF-8"?>
<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"
 xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"
 xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"
 xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0"
 xmlns:number="urn:oasis:names:tc:opendocument:xmlns:datastyle:1.0"
 xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
 xmlns:of="urn:oasis:names:tc:opendocument:xmlns:of:1.2"
 office:version="1.3" office:mimetype="application/vnd.oasis.opendocument.spreadsheet">
<office:automatic-styles>
 <number:date-style style:name="isodate"><number:year number:style="long"/><number:text>-</number:text><number:month number:style="long"/><number:text>-</number:text><number:day number:style="long"/></number:date-style>
 <style:style style:name="date" style:family="table-cell" style:data-style-name="isodate"/>
 <style:style style:name="head" style:family="table-cell"><style:text-properties fo:font-weight="bold"/></style:style>
</office:automatic-styles>
<office:body><office:spreadsheet>
'''

def fods_cell(v, head):
    if isinstance(v, dict) and 'date' in v:
        d = v['date']
        return (f'<table:table-cell table:style-name="date" office:value-type="date" '
                f'office:date-value="{d}"><text:p>{d}</text:p></table:table-cell>')
    if isinstance(v, dict):  # a formula with the value it computes
        return (f'<table:table-cell table:formula={quoteattr(v["formula"])} office:value-type="float" '
                f'office:value="{v["value"]}"><text:p>{v["value"]}</text:p></table:table-cell>')
    if v in (None, ''):
        return '<table:table-cell/>'
    st = ' table:style-name="head"' if head else ''
    if isinstance(v, (int, float)):
        return f'<table:table-cell{st} office:value-type="float" office:value="{v}"><text:p>{v}</text:p></table:table-cell>'
    return f'<table:table-cell{st} office:value-type="string"><text:p>{escape(v)}</text:p></table:table-cell>'

def fods(sheets, path):
    out = [FODS_HEAD]
    for name, rows in sheets:
        out.append(f'<table:table table:name={quoteattr(name)}>')
        for i, row in enumerate(rows):
            out.append('<table:table-row>' + ''.join(fods_cell(v, i == 0) for v in row) + '</table:table-row>')
        out.append('</table:table>')
    out.append('</office:spreadsheet></office:body></office:document>\n')
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join(out))

def md_table(path, heading):
    """The first pipe table after the heading line `heading` in a markdown file, as rows of cells."""
    lines = open(path, encoding='utf-8').read().splitlines()
    i = lines.index(heading)
    while not lines[i].startswith('|'):
        i += 1
    rows = []
    while i < len(lines) and lines[i].startswith('|'):
        cells = [c.strip() for c in lines[i].strip().strip('|').split('|')]
        if not all(re.fullmatch(r':?-+:?', c) for c in cells):
            rows.append(cells)
        i += 1
    return rows

def front_matter(path, key):
    m = re.search(rf'^{key}: (.*)$', open(path, encoding='utf-8').read(), re.M)
    return m.group(1).strip()

def policy_tables(corpus, out):
    p = lambda name: os.path.join(corpus, 'policies', name + '.md')
    tables = [  # sheet, source file in corpus-office, source markdown, section heading
        ('Hotel caps', 'policies/travel-and-expenses.docx', p('travel-and-expenses'), '## 4 Per-diem rates and hotel caps'),
        ('Approval limits', 'policies/travel-and-expenses.docx', p('travel-and-expenses'), '## 6 Approval limits'),
        ('Retention schedule', 'policies/data-retention-and-privacy.odt', p('data-retention-and-privacy'), '## 3 Retention schedule'),
        ('Standard kit', 'policies/remote-work-and-equipment.epub', p('remote-work-and-equipment'), '### 3.1 Standard kit'),
    ]
    sheets, sources = [], [['Sheet', 'Source file', 'Section', 'Policy effective date', 'Data rows']]
    for name, office_file, md, heading in tables:
        rows = md_table(md, heading)
        sheets.append((name, rows))
        sources.append([name, office_file, heading.lstrip('# '),
                        {'date': front_matter(md, 'effective_date')},
                        {'formula': f"of:=COUNTA(['{name}'.A2:.A100])", 'value': len(rows) - 1}])
    total = sum(r[4]['value'] for r in sources[1:])
    sources.append(['Total', '', '', '', {'formula': f'of:=SUM([.E2:.E{len(sources)}])', 'value': total}])
    sheets.append(('Sources', sources))
    fods(sheets, out)

def unit_sheet(out):
    fods([
        ('Shipments', [
            ['Depot', 'Week starting', 'Parcels', 'Fuel (litres)'],
            ['Rotterdam', {'date': '2024-05-06'}, 41250, 5120.5],
            ['Antwerp', {'date': '2024-05-06'}, 18400, 2210.25],
            ['Hamburg', {'date': '2024-05-06'}, 15730, 1980.75],
            ['Total', '', {'formula': 'of:=SUM([.C2:.C4])', 'value': 75380},
             {'formula': 'of:=SUM([.D2:.D4])', 'value': 9311.5}],
        ]),
        ('Notes', [
            ['Note'],
            ['Figures are for the week starting 6 May 2024.'],
            ['Source: Operations weekly, 21 May 2024.'],
        ]),
    ], out)

# --- a password-protected docx, through LibreOffice's UNO API ----------------------------------
def encrypt(src, dst, password, pipe):
    import uno
    from com.sun.star.beans import PropertyValue, NamedValue
    def pv(name, value):
        p = PropertyValue(); p.Name = name; p.Value = value; return p
    local = uno.getComponentContext()
    resolver = local.ServiceManager.createInstanceWithContext('com.sun.star.bridge.UnoUrlResolver', local)
    for _ in range(120):
        try:
            ctx = resolver.resolve(f'uno:pipe,name={pipe};urp;StarOffice.ComponentContext')
            break
        except Exception:
            time.sleep(0.5)
    else:
        sys.exit('cannot reach soffice')
    desktop = ctx.ServiceManager.createInstanceWithContext('com.sun.star.frame.Desktop', ctx)
    doc = desktop.loadComponentFromURL(uno.systemPathToFileUrl(src), '_blank', 0, (pv('Hidden', True),))
    # OOXML encryption (ECMA-376 "standard", AES-128) is asked for through EncryptionData.
    enc = uno.Any('[]com.sun.star.beans.NamedValue',
                  (NamedValue('CryptoType', 'StrongEncryptionDataSpace'), NamedValue('OOXPassword', password)))
    uno.invoke(doc, 'storeToURL', (uno.systemPathToFileUrl(dst),
               (pv('FilterName', 'MS Word 2007 XML'), pv('Overwrite', True), PropertyValue('EncryptionData', 0, enc, 0))))
    # read it back with the password: the file must open
    check = desktop.loadComponentFromURL(uno.systemPathToFileUrl(dst), '_blank', 0,
                                         (pv('Hidden', True), pv('Password', password)))
    text = check.getText().getString()
    check.close(True)
    doc.close(True)
    try:
        desktop.terminate()
    except Exception:
        pass  # the bridge goes away while terminating
    return text

# --- scanned pages: grey PNG / JPEG from pdftoppm's PGM ----------------------------------------
def images(pgm, png, jpg, dpi):
    from PIL import Image
    im = Image.open(pgm)
    assert im.mode == 'L', im.mode
    if png:
        im.save(png, optimize=True, dpi=(dpi, dpi))
    if jpg:
        im.save(jpg, quality=75, optimize=True, dpi=(dpi, dpi))

# --- checks ------------------------------------------------------------------------------------
MARKER = re.compile(r'^(?:[ \t]*(?:\d+\.|[a-z][.)]|[-*])[ \t]{2,}|[ \t]+(?:\d+\.|[a-z]\))[ \t]+)', re.M)

def words(text):
    """The words of a text, without list markers ("1.  " or "a)  " as pandoc writes them, or indented
    "1. " / "a) " in the meeting notes): list numbering is formatting, and not every reader shows it."""
    return re.findall(r'\w+', MARKER.sub('', text))

def same_words(a, b, slack):
    """The words of plain text b must be those of a; b may have up to `slack` extra words at its start
    (a title page or Title paragraph repeating the heading)."""
    wa, wb = words(open(a, encoding='utf-8').read()), words(open(b, encoding='utf-8').read())
    for skip in range(0, slack + 1):
        if wb[skip:] == wa:
            return
    import difflib
    sm = difflib.SequenceMatcher(a=wa, b=wb, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op != 'equal':
            print(f'  {op}: source {" ".join(wa[i1:i2])!r} -> output {" ".join(wb[j1:j2])!r}', file=sys.stderr)
    sys.exit(f'words differ between {a} and {b}')

BREAKS = re.compile(r'</(?:w:p|a:p|text:p|text:h|p|h[1-6]|li|td|th|tr|div)>|<(?:w:br|w:tab|w:cr|text:line-break|text:tab|a:br|br)\b[^>]*>')

def xml_text(xml):
    xml = re.sub(r'<w:del\b.*?</w:del>', ' ', xml, flags=re.S)  # tracked deletions are not text
    xml = re.sub(r'<text:s text:c="(\d+)"/>', lambda m: ' ' * int(m.group(1)), xml)
    xml = BREAKS.sub(' ', xml)
    xml = re.sub(r'<[^>]+>', '', xml)
    return ' '.join(html.unescape(xml).split())

def zip_text(path):
    """The text of the XML parts of a zip container (docx, pptx, xlsx, odt, odp, ods, epub)."""
    parts = []
    with zipfile.ZipFile(path) as z:
        for n in sorted(z.namelist(), key=lambda n: [int(t) if t.isdigit() else t for t in re.split(r'(\d+)', n)]):
            if re.search(r'(document|footnotes|sharedStrings|content|slide\d+|notesSlide\d+)\.xml$|\.xhtml$', n):
                parts.append(xml_text(z.read(n).decode('utf-8')))
    return ' '.join(parts)

def expect(path, text_file, phrases):
    text = ' '.join(open(text_file, encoding='utf-8').read().split()) if text_file else zip_text(path)
    missing = [p for p in phrases if ' '.join(p.split()) not in text]
    if missing:
        sys.exit(f'{path}: expected text not found: {missing}')

if __name__ == '__main__':
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == 'txt2md':
        sys.stdout.write(txt2md(open(args[0], encoding='utf-8').read()))
    elif cmd == 'policy-tables':
        policy_tables(*args)
    elif cmd == 'unit-sheet':
        unit_sheet(*args)
    elif cmd == 'encrypt':
        text = encrypt(*args)
        sys.stdout.write(text)
        sys.stdout.flush()
        os._exit(0)  # pyuno can crash at interpreter exit; everything is written by now
    elif cmd == 'images':
        images(args[0], args[1] or None, args[2] or None, int(args[3]))
    elif cmd == 'same-words':
        same_words(args[0], args[1], int(args[2]))
    elif cmd == 'expect':        # expect FILE TEXTFILE-or-'' PHRASE...
        expect(args[0], args[1], args[2:])
    elif cmd == 'zip-text':
        print(zip_text(args[0]))
    else:
        sys.exit(f'unknown command {cmd}')
PY
fx() { "$PY" "$WORK/fx.py" "$@"; }

# plain FILE OUT: the text of a document as pandoc reads it (docx, epub, rtf, markdown, html); odt
# is read by fx.py instead, because pandoc 2.17's odt reader drops table header rows.
plain() {
  local from
  case $1 in
    *.odt) fx zip-text "$1" >"$2"; return ;;
    *.md) from=markdown-smart ;; *.html) from=html ;; *.docx) from=docx ;;
    *.epub) from=epub ;; *.rtf) from=rtf ;; *) die "plain: unknown format $1" ;;
  esac
  pandoc -f "$from" -t plain --wrap=none "$1" -o "$2"
}

# Fresh output folders (only these three are touched).
rm -rf "$CORPUS" "$OFFICE" "$SCANNED"
mkdir -p "$CORPUS" "$OFFICE" "$SCANNED"

# =============================================================================================
# 1. tests/data/corpus-office/
# =============================================================================================
mkdir -p "$CORPUS"/{policies,meetings,intranet,email,plans,tools,tables,slides}
P=$SRC/policies

pd -f markdown-smart "$P/travel-and-expenses.md" -o "$CORPUS/policies/travel-and-expenses.docx"
pd -f markdown-smart "$P/information-security-acceptable-use.md" -o "$WORK/information-security-acceptable-use.docx"
lo docx:"MS Word 2007 XML" "$CORPUS/policies" "$WORK/information-security-acceptable-use.docx"
pd -f markdown-smart "$P/data-retention-and-privacy.md" -o "$CORPUS/policies/data-retention-and-privacy.odt"
pd -f markdown-smart --epub-chapter-level=2 -M lang=en-GB \
  -M identifier=urn:uuid:7d0c6f5e-3a51-4c0e-9c57-6b2f2d1e0a01 \
  "$P/remote-work-and-equipment.md" -o "$CORPUS/policies/remote-work-and-equipment.epub"

M=$SRC/meetings
fx txt2md "$M/2024-04-09-it-steering-committee.txt" >"$WORK/2024-04-09-it-steering-committee.md"
pd -f markdown-smart "$WORK/2024-04-09-it-steering-committee.md" -o "$CORPUS/meetings/2024-04-09-it-steering-committee.docx"
fx txt2md "$M/2024-05-21-operations-weekly.txt" >"$WORK/2024-05-21-operations-weekly.md"
pd -f markdown-smart "$WORK/2024-05-21-operations-weekly.md" -o "$WORK/2024-05-21-operations-weekly.odt"
lo rtf "$CORPUS/meetings" "$WORK/2024-05-21-operations-weekly.odt"

# The intranet page without its site chrome (header, navigation, related links, footer, scripts).
{
  echo '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>IT service desk: how to get help</title></head><body>'
  sed -n '/<main/,/<\/main>/p' "$SRC/intranet/it-service-desk.html"
  echo '</body></html>'
} >"$WORK/it-service-desk.html"
lo odt "$CORPUS/intranet" "$WORK/it-service-desk.html" "HTML (StarWriter)"

cp -p "$SRC"/email/* "$CORPUS/email/"
cp -p "$SRC"/plans/*.pdf "$CORPUS/plans/"
cp -p "$SRC"/tools/*.py "$CORPUS/tools/"
for f in QUESTIONS.md .ragboxignore; do
  if [ -f "$SRC/$f" ]; then cp -p "$SRC/$f" "$CORPUS/$f"; fi
done

# Spreadsheets of the policies' data tables.
fx policy-tables "$SRC" "$WORK/policy-tables.fods"
lo xlsx:"Calc Office Open XML" "$CORPUS/tables" "$WORK/policy-tables.fods"
lo ods "$CORPUS/tables" "$WORK/policy-tables.fods"
# CSV options: comma, double quotes, UTF-8, first line 1, -, language, no quoting of all text,
# -, cells as shown (dates as 2024-03-01), no formulas, -, sheet 3 ("Retention schedule").
lo 'csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,true,false,false,3' "$WORK/csv" "$WORK/policy-tables.fods"
mv "$WORK/csv/policy-tables-Retention schedule.csv" "$CORPUS/tables/retention-schedule.csv"

# Slides quoting the security policy (sentences verbatim), with speaker notes.
cat >"$WORK/infosec-slides.md" <<'EOF'
---
title: Information Security and Acceptable Use Policy
subtitle: Key rules for everyone with a Harbourline account (HL-POL-IT-002)
---

# Passwords

- Every password must be at least 14 characters long.
- A passphrase of four or more unrelated words is recommended over a short complex password.
- Store passwords in KeyVault, the company password manager, which is installed on every laptop.
- An account is locked for 15 minutes after 10 failed sign-in attempts in a row.

::: notes
Passwords are not changed on a schedule. A password must be changed at once if there is any sign that it has been seen, guessed or leaked.
:::

# Multi-factor authentication

- Multi-factor authentication (MFA) is required for e-mail, the VPN, the HR and finance systems, and every cloud service that supports it.
- Approved second factors are, in order of preference: a FIDO2 security key, and the Harbourline Authenticator app on a phone.
- Text messages (SMS) are not accepted as a second factor.

::: notes
If you lose a security key or the phone that holds the authenticator app, tell the service desk the same day so that the lost factor can be revoked.
:::

# Information classification

| Class | Examples | Sharing outside Harbourline |
|---|---|---|
| Public | Published price lists, press releases | Allowed |
| Internal | Org charts, this policy, meeting notes | With a signed NDA |
| Confidential | Customer contracts, shipment manifests | Only with the owner's approval |
| Restricted | Payroll, health data, security keys | Never without a director's approval |

# Phishing and social engineering

- Use the "Report phish" button in the mail client for any suspicious e-mail.
- Payment changes requested by e-mail (a new bank account for a supplier, an urgent transfer) must be confirmed by phone using a number already on file, never one given in the e-mail.

::: notes
Harbourline runs a simulated phishing campaign every quarter.
:::
EOF
pd -f markdown-smart "$WORK/infosec-slides.md" -o "$CORPUS/slides/information-security-acceptable-use.pptx"
lo odp "$CORPUS/slides" "$CORPUS/slides/information-security-acceptable-use.pptx"

# Same words as the source, format by format (a Title paragraph / title page may come first).
check_words() {  # SOURCE-as-pandoc-reads-it OUTPUT SLACK
  plain "$1" "$WORK/a.txt"
  plain "$2" "$WORK/b.txt"
  fx same-words "$WORK/a.txt" "$WORK/b.txt" "$3" || die "$2: not the words of $1"
}
check_words "$P/travel-and-expenses.md" "$CORPUS/policies/travel-and-expenses.docx" 4
check_words "$P/information-security-acceptable-use.md" "$CORPUS/policies/information-security-acceptable-use.docx" 6
check_words "$P/data-retention-and-privacy.md" "$CORPUS/policies/data-retention-and-privacy.odt" 5
check_words "$P/remote-work-and-equipment.md" "$CORPUS/policies/remote-work-and-equipment.epub" 5
check_words "$WORK/2024-04-09-it-steering-committee.md" "$CORPUS/meetings/2024-04-09-it-steering-committee.docx" 0
check_words "$WORK/2024-05-21-operations-weekly.md" "$CORPUS/meetings/2024-05-21-operations-weekly.rtf" 0
check_words "$WORK/it-service-desk.html" "$CORPUS/intranet/it-service-desk.odt" 0
# ... and the meeting markdown has the words of the original text (pandoc's plain text keeps the
# list markers; the underlines have no words).
for m in 2024-04-09-it-steering-committee 2024-05-21-operations-weekly; do
  plain "$WORK/$m.md" "$WORK/md.txt"
  fx same-words "$M/$m.txt" "$WORK/md.txt" 0
done
# Key answers survive (the QUESTIONS.md evidence, whitespace collapsed).
fx expect "$CORPUS/policies/travel-and-expenses.docx" "" \
  "Submit each expense claim in the ExpensePoint app within 30 days of the last day of the trip." "London GBP 65 GBP 210"
fx expect "$CORPUS/policies/information-security-acceptable-use.docx" "" \
  "Report every suspected security incident to the Security Operations team within 4 hours of noticing it"
fx expect "$CORPUS/policies/data-retention-and-privacy.odt" "" \
  "Financial records, invoices and expense receipts 7 years End of the financial year Finance"
fx expect "$CORPUS/policies/remote-work-and-equipment.epub" "" "for up to 20 working days per calendar year in total"
fx expect "$CORPUS/meetings/2024-04-09-it-steering-committee.docx" "" \
  "MFA is rolled out to all warehouse and depot staff by 30 June 2024"
plain "$CORPUS/meetings/2024-05-21-operations-weekly.rtf" "$WORK/ops.txt"
fx expect "$CORPUS/meetings/2024-05-21-operations-weekly.rtf" "$WORK/ops.txt" \
  "a Saturday morning shift starts at the Antwerp depot on 1 June 2024"
fx expect "$CORPUS/intranet/it-service-desk.odt" "" "internal extension 4357"
fx expect "$CORPUS/tables/policy-tables.xlsx" "" "London" "GBP 210" "Policy effective date"
fx expect "$CORPUS/tables/policy-tables.ods" "" "London GBP 65 GBP 210" "Data rows" "2024-03-01" "Total 25"
sheets() {  # FILE: the sheet names, one a line
  case $1 in
    *.xlsx) unzip -p "$1" xl/workbook.xml | grep -o '<sheet name="[^"]*"' | sed 's/.*name="//; s/"$//' ;;
    *.ods) unzip -p "$1" content.xml | grep -o '<table:table table:name="[^"]*"' | sed 's/.*name="//; s/"$//' ;;
  esac
}
for f in "$CORPUS/tables/policy-tables.xlsx" "$CORPUS/tables/policy-tables.ods"; do
  [ "$(sheets "$f" | paste -sd '|')" = 'Hotel caps|Approval limits|Retention schedule|Standard kit|Sources' ] \
    || die "$f: unexpected sheets $(sheets "$f" | paste -sd '|')"
done
grep -qxF '"Financial records, invoices and expense receipts",7 years,End of the financial year,Finance' \
  "$CORPUS/tables/retention-schedule.csv" || die "retention-schedule.csv: row not found"
fx expect "$CORPUS/slides/information-security-acceptable-use.pptx" "" "Information classification" \
  "Harbourline runs a simulated phishing campaign every quarter."
fx expect "$CORPUS/slides/information-security-acceptable-use.odp" "" "Information classification" \
  "Harbourline runs a simulated phishing campaign every quarter."

# =============================================================================================
# 2. tests/data/office/  (what each file holds: EXPECTED.md, written at the end of this section)
# =============================================================================================
cat >"$WORK/headings-lists-table.md" <<'EOF'
# Depot handbook

Every depot keeps this handbook at the gate office.[^1]

## Opening the depot

### Morning checklist

- Unlock gate 3 and switch on the yard lights.
- Check that the fire exits are clear.
- Start the dock scanners.

1. Sign in to the shift-planning app.
2. Read the handover notes from the night shift.
3. Brief the team at 06:15.

## Contacts

| Role | Name | Extension |
|---|---|---|
| Site lead | Ruben Claes | 4101 |
| Service desk | IT | 4357 |

[^1]: The handbook is reviewed every January.
EOF
pd -f markdown-smart "$WORK/headings-lists-table.md" -o "$OFFICE/headings-lists-table.docx"
pd -f markdown-smart "$WORK/headings-lists-table.md" -o "$OFFICE/headings-lists-table.odt"

# Tracked changes: pandoc writes w:ins / w:del from insertion / deletion spans; LibreOffice re-saves
# the file (it keeps the changes, as redlines, and numbers them properly).
cat >"$WORK/tracked-changes.md" <<'EOF'
# Saturday opening

The Antwerp depot opens at [07:00]{.deletion author="Jonas Feld" date="2024-05-21T09:00:00Z"}[06:00]{.insertion author="Jonas Feld" date="2024-05-21T09:00:00Z"} on Saturdays.

The shift ends at 12:00. [Overtime is paid at the weekend rate.]{.insertion author="Ruben Claes" date="2024-05-22T10:30:00Z"} [Lunch is provided.]{.deletion author="Ruben Claes" date="2024-05-22T10:30:00Z"}
EOF
pd -f markdown-smart "$WORK/tracked-changes.md" -o "$WORK/tracked-changes.docx"
lo docx:"MS Word 2007 XML" "$OFFICE" "$WORK/tracked-changes.docx"

cat >"$WORK/slides.md" <<'EOF'
# Depot volumes

- Rotterdam handled 41,250 parcels in the week starting 6 May 2024.
- Antwerp handled 18,400 parcels.

::: notes
Rotterdam had its busiest April so far.
:::

# Late deliveries by depot

| Depot | Late parcels | Share |
|---|---:|---:|
| Rotterdam | 812 | 2.0% |
| Antwerp | 1,104 | 6.0% |
| Hamburg | 377 | 2.4% |

# Next steps

A Saturday morning shift starts at the Antwerp depot on 1 June 2024.
EOF
pd -f markdown-smart "$WORK/slides.md" -o "$OFFICE/slides.pptx"
lo odp "$OFFICE" "$OFFICE/slides.pptx"

fx unit-sheet "$WORK/sheet.fods"
lo xlsx:"Calc Office Open XML" "$OFFICE" "$WORK/sheet.fods"
lo ods "$OFFICE" "$WORK/sheet.fods"
lo xls:"MS Excel 97" "$OFFICE" "$WORK/sheet.fods"
lo 'csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,true,false,false,1' "$WORK/csv" "$WORK/sheet.fods"
mv "$WORK/csv/sheet-Shipments.csv" "$OFFICE/sheet.csv"
lo 'tsv:Text - txt - csv (StarCalc):9,34,76,1,,0,false,true,true,false,false,1' "$WORK/csv" "$WORK/sheet.fods"
mv "$WORK/csv/sheet-Shipments.tsv" "$OFFICE/sheet.tsv"

cat >"$WORK/book.md" <<'EOF'
---
title: Harbourline Stories
author: Eva Lindqvist
---

# The first depot

Harbourline opened its first depot in Rotterdam Waalhaven in 1998, with two lorries and a rented shed.

By the end of the first year the depot handled 300 parcels a day.

# Crossing the border

The Antwerp depot followed in 2004 and the Hamburg depot in 2011.

Each new depot started with a Saturday shift until the weekday routes were stable.
EOF
pd -f markdown-smart --epub-chapter-level=1 -M lang=en-GB \
  -M identifier=urn:uuid:7d0c6f5e-3a51-4c0e-9c57-6b2f2d1e0a02 "$WORK/book.md" -o "$OFFICE/book.epub"

cat >"$WORK/letter.md" <<'EOF'
Dear Ms Müller, thank you for your order of 12 pallets. The delivery to your café in Rotterdam is **confirmed** for Tuesday 4 June 2024.

The transport costs £180 (€210), payable within 30 days. Kind regards, Eva Lindqvist
EOF
pd -f markdown-smart "$WORK/letter.md" -o "$WORK/letter.odt"
lo rtf "$OFFICE" "$WORK/letter.odt"

# Legacy binary formats, for the skip path.
cp "$OFFICE/headings-lists-table.odt" "$WORK/legacy.odt"
lo doc:"MS Word 97" "$OFFICE" "$WORK/legacy.odt"
cp "$OFFICE/slides.pptx" "$WORK/legacy.pptx"
lo ppt:"MS PowerPoint 97" "$OFFICE" "$WORK/legacy.pptx"

# A password-protected docx (password: ragbox), through a LibreOffice listening on a private pipe.
cat >"$WORK/encrypted.md" <<'EOF'
This document is protected with a password.
EOF
pd -f markdown-smart "$WORK/encrypted.md" -o "$WORK/encrypted-plain.docx"
PIPE=ragbox-fixtures-$$
soffice -env:UserInstallation="$LO_PROFILE" --headless --norestore --invisible \
  "--accept=pipe,name=$PIPE;urp;" >"$WORK/listener.log" 2>&1 &
SOFFICE_PID=$!
fx encrypt "$WORK/encrypted-plain.docx" "$OFFICE/encrypted.docx" ragbox "$PIPE" >"$WORK/decrypted.txt"
for _ in $(seq 30); do  # it was asked to terminate; give it 15 s
  kill -0 "$SOFFICE_PID" 2>/dev/null || break
  sleep 0.5
done
stop_listener
grep -qF 'This document is protected with a password.' "$WORK/decrypted.txt" || die "encrypted.docx does not open with its password"

cat >"$OFFICE/EXPECTED.md" <<'EOF'
# What the office fixtures contain

Made by `scripts/make-office-fixtures.sh` (see README.md). Text is quoted exactly; a parser's output
should contain each quoted sentence after whitespace is collapsed. "Heading N" means a heading of
level N (Word style `Heading1`..`Heading3` in docx, `text:h` with `text:outline-level` in odt).

## headings-lists-table.docx, headings-lists-table.odt (pandoc; same content)

- Heading 1 `Depot handbook`
  - paragraph: `Every depot keeps this handbook at the gate office.` with footnote 1:
    `The handbook is reviewed every January.` (docx: word/footnotes.xml; odt: `text:note` inline)
- Heading 2 `Opening the depot`
  - Heading 3 `Morning checklist`
    - bulleted list, 3 items: `Unlock gate 3 and switch on the yard lights.` /
      `Check that the fire exits are clear.` / `Start the dock scanners.`
    - numbered list (1., 2., 3.), 3 items: `Sign in to the shift-planning app.` /
      `Read the handover notes from the night shift.` / `Brief the team at 06:15.`
- Heading 2 `Contacts`
  - table, header row `Role | Name | Extension`, rows `Site lead | Ruben Claes | 4101` and
    `Service desk | IT | 4357`
- No title metadata. Heading path of the table: `Depot handbook > Contacts`.

## tracked-changes.docx (pandoc, re-saved by LibreOffice)

- Heading 1 `Saturday opening`
- paragraph 1: accepted text `The Antwerp depot opens at 06:00 on Saturdays.`
  (`07:00` is a tracked deletion `w:del`/`w:delText`, `06:00` a tracked insertion `w:ins`, author Jonas Feld)
- paragraph 2: accepted text `The shift ends at 12:00. Overtime is paid at the weekend rate.`
  (the second sentence is an insertion by Ruben Claes; `Lunch is provided.` at the end is a deletion)
- With all changes rejected instead: `The Antwerp depot opens at 07:00 on Saturdays.` and
  `The shift ends at 12:00. Lunch is provided.` A parser should give the accepted text and never
  the deleted words (`07:00`, `Lunch is provided.`).

## slides.pptx (pandoc), slides.odp (LibreOffice, from the pptx)

3 slides, no title slide:

1. title `Depot volumes`; bullets `Rotterdam handled 41,250 parcels in the week starting 6 May 2024.` /
   `Antwerp handled 18,400 parcels.`; speaker notes `Rotterdam had its busiest April so far.`
2. title `Late deliveries by depot`; a table, header row `Depot | Late parcels | Share`, rows
   `Rotterdam | 812 | 2.0%`, `Antwerp | 1,104 | 6.0%`, `Hamburg | 377 | 2.4%`; no notes
3. title `Next steps`; text `A Saturday morning shift starts at the Antwerp depot on 1 June 2024.`; no notes

## sheet.xlsx, sheet.ods, sheet.xls (LibreOffice, from the same flat ODF); sheet.csv, sheet.tsv

Two sheets, in this order:

1. `Shipments` (A1:D5), header row first (bold):

   | Depot | Week starting | Parcels | Fuel (litres) |
   |---|---|---|---|
   | Rotterdam | 2024-05-06 | 41250 | 5120.5 |
   | Antwerp | 2024-05-06 | 18400 | 2210.25 |
   | Hamburg | 2024-05-06 | 15730 | 1980.75 |
   | Total | (empty) | 75380 | 9311.5 |

   - B2:B4 are dates (2024-05-06; number format YYYY-MM-DD; xlsx/xls store the serial 45418).
   - C5 is the formula `SUM(C2:C4)` = 75380 and D5 is `SUM(D2:D4)` = 9311.5 (the computed values are
     stored with the formulas; ods: `of:=SUM([.C2:.C4])`).
   - Numbers are numbers (41250, 5120.5), not text.
2. `Notes` (A1:A3): `Note` / `Figures are for the week starting 6 May 2024.` /
   `Source: Operations weekly, 21 May 2024.`

`sheet.csv` (comma) and `sheet.tsv` (tab) are the `Shipments` sheet only, UTF-8, values as shown,
no quotes needed, LF line ends, a final newline:

    Depot,Week starting,Parcels,Fuel (litres)
    Rotterdam,2024-05-06,41250,5120.5
    Antwerp,2024-05-06,18400,2210.25
    Hamburg,2024-05-06,15730,1980.75
    Total,,75380,9311.5

## book.epub (pandoc, EPUB 3)

Title `Harbourline Stories`, author `Eva Lindqvist`, language en-GB. Spine: a title page, then 2 chapters
(`EPUB/text/ch001.xhtml`, `ch002.xhtml`); navigation in `EPUB/nav.xhtml` (and `toc.ncx`).

1. Heading 1 `The first depot`: `Harbourline opened its first depot in Rotterdam Waalhaven in 1998, with two lorries and a rented shed.`
   / `By the end of the first year the depot handled 300 parcels a day.`
2. Heading 1 `Crossing the border`: `The Antwerp depot followed in 2004 and the Hamburg depot in 2011.`
   / `Each new depot started with a Saturday shift until the weekday routes were stable.`

## letter.rtf (LibreOffice, from a pandoc odt)

2 paragraphs:

1. `Dear Ms Müller, thank you for your order of 12 pallets. The delivery to your café in Rotterdam is confirmed for Tuesday 4 June 2024.`
   (the word `confirmed` is bold: `\b`)
2. `The transport costs £180 (€210), payable within 30 days. Kind regards, Eva Lindqvist`

Non-ASCII is written the way Word and LibreOffice do it: `\uN` followed by a one-character fallback
in the ANSI code page (`\u252\'fc` for ü, `\u233\'e9` é, `\u163\'a3` £, `\u8364\'80` €), so a reader
must skip one fallback character after each `\uN` (the default `\uc1`; the file has no `\uc` word).

## legacy.doc, legacy.ppt (LibreOffice; Word 97 and PowerPoint 97 binary, OLE2 compound files)

For the skip path ("legacy format, not supported"). `legacy.doc` holds the text of
headings-lists-table.*, `legacy.ppt` the slides of slides.pptx. Both start with the OLE2 signature
`D0 CF 11 E0 A1 B1 1A E1`. (`legacy.ppt` has no preview bitmap: LibreOffice's option for it is off.)

## encrypted.docx (LibreOffice, through its UNO API)

A password-protected Word file: password `ragbox`. It is not a zip: it is an OLE2 compound file
(signature `D0 CF 11 E0 A1 B1 1A E1`) with the streams `EncryptionInfo` and `EncryptedPackage`
(ECMA-376 standard encryption, AES-128). Decrypted, it says `This document is protected with a password.`
A parser should report it as encrypted and skip it, not crash or call it a corrupt zip.

## Not made

- No other formats are missing: every fixture asked for was produced.
EOF

# Check the unit fixtures against what EXPECTED.md says.
part_has() {  # ZIPFILE PART REGEX (no pipe into grep -q: with pipefail, unzip's SIGPIPE would count)
  unzip -p "$1" "$2" >"$WORK/part.xml"
  grep -q -- "$3" "$WORK/part.xml"
}
fx expect "$OFFICE/headings-lists-table.docx" "" "Depot handbook" "Every depot keeps this handbook at the gate office." \
  "The handbook is reviewed every January." "Check that the fire exits are clear." "Brief the team at 06:15." \
  "Role Name Extension" "Service desk IT 4357"
part_has "$OFFICE/headings-lists-table.docx" word/document.xml 'w:pStyle w:val="Heading3"' || die "docx: no Heading3"
fx expect "$OFFICE/headings-lists-table.odt" "" "Morning checklist" "The handbook is reviewed every January." \
  "Role Name Extension" "Site lead Ruben Claes 4101"
part_has "$OFFICE/headings-lists-table.odt" content.xml 'text:outline-level="3"' || die "odt: no level-3 heading"
fx expect "$OFFICE/tracked-changes.docx" "" "The Antwerp depot opens at 06:00 on Saturdays." \
  "The shift ends at 12:00. Overtime is paid at the weekend rate."
part_has "$OFFICE/tracked-changes.docx" word/document.xml '<w:delText[^>]*>07:00</w:delText>' || die "tracked-changes.docx: no deletion"
part_has "$OFFICE/tracked-changes.docx" word/document.xml '<w:ins ' || die "tracked-changes.docx: no insertion"
fx expect "$OFFICE/slides.pptx" "" "Depot volumes" "Late deliveries by depot" "Next steps" \
  "Rotterdam had its busiest April so far." "Depot Late parcels Share" "Antwerp 1,104 6.0%"
[ "$(unzip -l "$OFFICE/slides.pptx" | grep -c 'ppt/slides/slide[0-9]*\.xml$')" = 3 ] || die "slides.pptx: not 3 slides"
fx expect "$OFFICE/slides.odp" "" "Depot volumes" "Late deliveries by depot" "Next steps" \
  "Rotterdam had its busiest April so far." "Antwerp 1,104 6.0%"
fx expect "$OFFICE/sheet.xlsx" "" "Fuel (litres)" "Figures are for the week starting 6 May 2024."
for f in "$OFFICE/sheet.xlsx" "$OFFICE/sheet.ods"; do
  [ "$(sheets "$f" | paste -sd '|')" = 'Shipments|Notes' ] || die "$f: unexpected sheets"
done
part_has "$OFFICE/sheet.xlsx" xl/worksheets/sheet1.xml '<f aca="false">SUM(C2:C4)</f><v>75380</v>' || die "sheet.xlsx: no formula"
fx expect "$OFFICE/sheet.ods" "" "Total 75380 9311.5" "2024-05-06"
printf '%s\n' 'Depot,Week starting,Parcels,Fuel (litres)' 'Rotterdam,2024-05-06,41250,5120.5' \
  'Antwerp,2024-05-06,18400,2210.25' 'Hamburg,2024-05-06,15730,1980.75' 'Total,,75380,9311.5' >"$WORK/sheet.csv"
cmp -s "$WORK/sheet.csv" "$OFFICE/sheet.csv" || die "sheet.csv differs from EXPECTED.md"
tr ',' '\t' <"$WORK/sheet.csv" | cmp -s - "$OFFICE/sheet.tsv" || die "sheet.tsv differs from EXPECTED.md"
lo 'csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,true,false,false,1' "$WORK/xls" "$OFFICE/sheet.xls"
cmp -s "$WORK/sheet.csv" "$WORK/xls/sheet-Shipments.csv" || die "sheet.xls does not read back as sheet.csv"
fx expect "$OFFICE/book.epub" "" "Harbourline Stories" "The first depot" "Crossing the border" \
  "Each new depot started with a Saturday shift until the weekday routes were stable."
[ "$(unzip -l "$OFFICE/book.epub" | grep -c 'EPUB/text/ch[0-9]*\.xhtml$')" = 2 ] || die "book.epub: not 2 chapters"
plain "$OFFICE/letter.rtf" "$WORK/letter.txt"
fx expect "$OFFICE/letter.rtf" "$WORK/letter.txt" \
  "Dear Ms Müller, thank you for your order of 12 pallets. The delivery to your café in Rotterdam is confirmed for Tuesday 4 June 2024." \
  "The transport costs £180 (€210), payable within 30 days. Kind regards, Eva Lindqvist"
grep -qF '\b' "$OFFICE/letter.rtf" && grep -qF "caf\\u233\\'e9" "$OFFICE/letter.rtf" || die "letter.rtf: bold or é not as expected"
lo txt:Text "$WORK/doc" "$OFFICE/legacy.doc"
grep -qF 'Every depot keeps this handbook at the gate office.' "$WORK/doc/legacy.txt" || die "legacy.doc does not read back"
lo odp "$WORK/ppt" "$OFFICE/legacy.ppt"
fx expect "$WORK/ppt/legacy.odp" "" "Late deliveries by depot" "Rotterdam had its busiest April so far."

# =============================================================================================
# 3. tests/data/scanned/
# =============================================================================================
PDF=$SRC/plans/business-continuity-plan.pdf
DPI=200
NPAGES=$(pdfinfo "$PDF" | awk '/^Pages:/ {print $2}')
# pdftoppm 22.12 writes RGB even with -gray -png, so render grey PGM and let PIL write PNG/JPEG.
pages=()
for n in $(seq 1 "$NPAGES"); do
  pdftoppm -r "$DPI" -gray -f "$n" -l "$n" -singlefile "$PDF" "$WORK/page-$n"
  fx images "$WORK/page-$n.pgm" "$WORK/scan-$n.png" "" "$DPI"
  pages+=("$WORK/scan-$n.png")
  pdftotext -layout -f "$n" -l "$n" "$PDF" "$SCANNED/page-$n.txt"
done
cp "$WORK/scan-1.png" "$SCANNED/page-1.png"
# Pages 1-2 as a scanner or fax server writes them: one TIFF, a bilevel (1-bit) CCITT Group 4 image a page.
for n in 1 2; do
  pdftoppm -r "$DPI" -mono -tiff -f "$n" -l "$n" -singlefile "$PDF" "$WORK/mono-$n"
done
tiffcp -c g4 "$WORK/mono-1.tif" "$WORK/mono-2.tif" "$SCANNED/business-continuity-plan-pages-1-2.tif"
[ "$(tiffinfo "$SCANNED/business-continuity-plan-pages-1-2.tif" 2>/dev/null | grep -c 'CCITT Group 4')" = 2 ] || die "TIFF: not two G4 pages"
# The same pages as a scanner's PDF: tiff2pdf keeps the Group 4 data as it is (/CCITTFaxDecode).
tiff2pdf -e 20240601000000 -o "$SCANNED/business-continuity-plan-pages-1-2-g4.pdf" "$SCANNED/business-continuity-plan-pages-1-2.tif"
[ "$(pdfimages -list "$SCANNED/business-continuity-plan-pages-1-2-g4.pdf" | grep -c ccitt)" = 2 ] || die "G4 PDF: not two CCITT pages"
fx images "$WORK/page-2.pgm" "" "$SCANNED/page-2.jpg" "$DPI"
img2pdf --engine internal --nodate -o "$SCANNED/business-continuity-plan-scanned.pdf" "${pages[@]}"
pdftotext -layout "$PDF" "$SCANNED/business-continuity-plan-scanned.txt"
# image-only: one image per page and no text layer
[ "$(pdfimages -list "$SCANNED/business-continuity-plan-scanned.pdf" | tail -n +3 | wc -l)" = "$NPAGES" ] || die "scanned PDF: not one image per page"
[ -z "$(pdftotext "$SCANNED/business-continuity-plan-scanned.pdf" - | tr -d '[:space:]')" ] || die "scanned PDF has a text layer"
grep -q 'Warehouse Management System (WMS) *6 hours *15 minutes' "$SCANNED/page-2.txt" || die "page-2.txt: RTO row not found"

# =============================================================================================
# READMEs (tool versions recorded from this run)
# =============================================================================================
V_PANDOC=$(pandoc --version | sed -n 1p)
V_SOFFICE=$(soffice --version | sed -n 1p)
V_POPPLER=$(pdftoppm -v 2>&1 | sed -n 1p)
V_IMG2PDF=$(img2pdf --version 2>&1 | sed -n 1p)
V_PIL=$("$PY" -c 'import PIL; print("Pillow", PIL.__version__)')
V_TIFFCP=$(tiffcp 2>&1 | sed -n 1p)

cat >"$OFFICE/README.md" <<EOF
# Office and e-book test fixtures

Made by \`scripts/make-office-fixtures.sh\` (run it from anywhere; it rebuilds this folder,
\`tests/data/corpus-office/\` and \`tests/data/scanned/\`). What each file here contains, sentence by
sentence: [EXPECTED.md](EXPECTED.md). The script checks its outputs against that list.

Tools: $V_PANDOC; $V_SOFFICE; $V_POPPLER; $V_IMG2PDF; $V_PIL (Debian 12).

How each was made: tiny markdown written in the script, converted by pandoc (docx, odt, pptx, epub)
or by LibreOffice headless (\`soffice --convert-to\`: odp from the pptx, rtf from a pandoc odt, doc, ppt,
the re-saved tracked-changes docx). The spreadsheets are a flat ODF file (FODS) written by the script
and converted by LibreOffice to xlsx, ods, xls, csv and tsv. \`encrypted.docx\` is saved by LibreOffice
through its UNO API with a password (\`ragbox\`); \`soffice --convert-to\` has no password option.

Byte-identical on every run: headings-lists-table.docx, sheet.csv, sheet.tsv. The others have the same
text every run but different bytes: pandoc stamps the zip entries of odt, pptx and epub with the wall
clock, and LibreOffice writes wall-clock zip times, random ids and font tables in varying order (and
encrypted.docx a random salt). Dates inside the documents are fixed (SOURCE_DATE_EPOCH, 2024-06-01).

Licence: the content is invented for this project (the same fictional company as the sample
corpus, tests/data/corpus/), the project's own.

## tests/data/corpus-office/

An Office copy of the sample corpus, same layout and file stems, same words (the script compares
them word by word; pandoc adds the markdown front-matter title as a Title paragraph or title page,
and keeps the other front-matter fields as document properties in docx and odt):

| tests/data/corpus/ | tests/data/corpus-office/ | made by |
|---|---|---|
| policies/travel-and-expenses.md | policies/travel-and-expenses.docx | pandoc |
| policies/information-security-acceptable-use.md | policies/information-security-acceptable-use.docx | pandoc, re-saved by LibreOffice |
| policies/data-retention-and-privacy.md | policies/data-retention-and-privacy.odt | pandoc |
| policies/remote-work-and-equipment.md | policies/remote-work-and-equipment.epub | pandoc, a chapter per section |
| meetings/2024-04-09-it-steering-committee.txt | meetings/2024-04-09-it-steering-committee.docx | script's text-to-markdown, pandoc |
| meetings/2024-05-21-operations-weekly.txt | meetings/2024-05-21-operations-weekly.rtf | script's text-to-markdown, pandoc odt, LibreOffice rtf |
| intranet/it-service-desk.html | intranet/it-service-desk.odt | the page's \`<main>\` only, LibreOffice Writer |
| email/*, plans/*.pdf, tools/*.py, QUESTIONS.md, .ragboxignore | the same | copied |

The meeting notes become documents with headings: the underlined titles become Heading 1 / Heading 2,
wrapped lines are joined into paragraphs, "Key: value" lines stay one per line, and the fixed-width
action-item table becomes a real table.

Extra files (duplicates of corpus content, not in tests/data/corpus/):

- \`tables/policy-tables.xlsx\`, \`tables/policy-tables.ods\`: sheets \`Hotel caps\` and \`Approval limits\`
  (travel-and-expenses, sections 4 and 6), \`Retention schedule\` (data-retention-and-privacy, section 3),
  \`Standard kit\` (remote-work-and-equipment, section 3.1), each the markdown table with its header row
  first and the cells as text, and \`Sources\` (Sheet, Source file, Section, Policy effective date as a
  date cell, Data rows as a COUNTA formula, and a Total row with a SUM formula = 25).
- \`tables/retention-schedule.csv\`: the \`Retention schedule\` sheet as CSV.
- \`slides/information-security-acceptable-use.pptx\` (pandoc) and \`.odp\` (LibreOffice): a title slide and
  four slides (Passwords, Multi-factor authentication, Information classification with a table,
  Phishing and social engineering) quoting the security policy, three with speaker notes.

So the answers to QUESTIONS.md 2 (hotel cap in London) and 3 (receipt retention) also appear in the
spreadsheets (and 3 in the CSV); an evaluation over this folder should accept those files too. The slides
avoid section 7 of the security policy (question 4). QUESTIONS.md itself is copied unchanged and still
names the original files; the table above maps them.
EOF

cat >"$SCANNED/README.md" <<EOF
# Scanned-page fixtures

Made by \`scripts/make-office-fixtures.sh\` from \`tests/data/corpus/plans/business-continuity-plan.pdf\`
(the sample corpus's own PDF, made by scripts/make-sample-pdf.py; the content is invented for this
project, the project's own).

| file | what |
|---|---|
| business-continuity-plan-scanned.pdf | all $NPAGES pages as images only (no text layer): ${DPI} dpi, 8-bit grey, lossless (Flate), A4 |
| business-continuity-plan-scanned.txt | ground truth for the whole PDF: \`pdftotext -layout\` of the original (pages separated by form feeds) |
| page-N.txt | ground truth per page (N = 1..$NPAGES), \`pdftotext -layout -f N -l N\` of the original |
| page-1.png | page 1, ${DPI} dpi, 8-bit grey PNG (the same image as page 1 of the PDF) |
| page-2.jpg | page 2, ${DPI} dpi, 8-bit grey JPEG, quality 75 |
| business-continuity-plan-pages-1-2.tif | pages 1 and 2 in one TIFF, ${DPI} dpi, bilevel (1-bit), CCITT Group 4: a scanner's or fax server's multi-page file |
| business-continuity-plan-pages-1-2-g4.pdf | the same two pages as an image-only PDF whose images are that Group 4 data (\`/CCITTFaxDecode\`, \`/K -1\`), as office scanners write bilevel PDFs |

Every image is 1654 x 2339 pixels (A4 at ${DPI} dpi; the dpi is also stored in the PNG and JPEG).
The layout text keeps table rows on one line, as OCR reads them: compare after collapsing whitespace.
Page 2 holds the recovery-objectives table (QUESTIONS.md question 6: "Warehouse Management System (WMS)
6 hours 15 minutes").

How: \`pdftoppm -r ${DPI} -gray\` renders PGM (this pdftoppm writes RGB PNG even with \`-gray -png\`),
PIL writes the grey PNG and JPEG (ImageMagick is not needed), and
\`img2pdf --engine internal --nodate\` wraps the PNGs (the internal engine writes no random /ID).
The TIFF: \`pdftoppm -r ${DPI} -mono -tiff\` a page, joined by \`tiffcp -c g4\`; its PDF:
\`tiff2pdf -e 20240601000000\` (a fixed date, so the bytes are the same every run).
Tools: $V_POPPLER; $V_IMG2PDF; $V_PIL; $V_TIFFCP. All of these files are byte-identical on every run with the
same tools.
EOF

# =============================================================================================
# Every file is non-empty and opens.
# =============================================================================================
while IFS= read -r -d '' f; do
  [ -s "$f" ] || die "empty: $f"
  case $f in
    *.docx|*.xlsx|*.pptx|*.odt|*.ods|*.odp|*.epub)
      if [ "$(basename "$f")" = encrypted.docx ]; then
        [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = d0cf11e0a1b11ae1 ] || die "not OLE2: $f"
      else
        unzip -tqq "$f" >/dev/null || die "bad zip: $f"
      fi ;;
    *.doc|*.ppt|*.xls)
      [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = d0cf11e0a1b11ae1 ] || die "not OLE2: $f" ;;
    *.rtf) [ "$(head -c 6 "$f")" = '{\rtf1' ] || die "not RTF: $f" ;;
    *.pdf) pdfinfo "$f" >/dev/null || die "bad PDF: $f" ;;
    *.png) [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || die "not PNG: $f" ;;
    *.jpg) [ "$(head -c 3 "$f" | od -An -tx1 | tr -d ' \n')" = ffd8ff ] || die "not JPEG: $f" ;;
    *.tif) tiffinfo "$f" >/dev/null 2>&1 || die "bad TIFF: $f" ;;
  esac
done < <(find "$CORPUS" "$OFFICE" "$SCANNED" -type f -print0)

echo "make-office-fixtures: ok"
du -sh "$CORPUS" "$OFFICE" "$SCANNED"
