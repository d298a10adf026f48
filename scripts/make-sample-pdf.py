#!/usr/bin/env python3
"""Generate the sample PDF of the test corpus: tests/data/corpus/plans/business-continuity-plan.pdf.

A three-page "Business Continuity Plan" for the fictional Harbourline Logistics, with numbered
sections, a table and facts that live on one specific page (the corpus questions cite the page):

  page 1: document control, 1 Purpose, 2 Scope, 3 Roles (Crisis Management Team)
  page 2: 4 Recovery objectives (table of RTO/RPO per system), 5 Alternate site
  page 3: 6 Communication, 7 Testing and exercises, 8 Review

Needs reportlab (`python3 -m venv /tmp/pdfvenv && /tmp/pdfvenv/bin/pip install reportlab`):

    /tmp/pdfvenv/bin/python scripts/make-sample-pdf.py [OUTPUT.pdf]

The output is byte-for-byte reproducible (reportlab's invariant mode: fixed dates and document id),
so re-running it does not change the committed file unless this script changed. Only the standard
Helvetica fonts are used (no embedding), and every paragraph is real text, so a text extractor
(pdftotext, pypdf, lopdf) gets the words back.
"""

from __future__ import annotations

import os
import sys

from reportlab import rl_config

rl_config.invariant = 1  # fixed creation date and /ID: reproducible bytes

from reportlab.lib import colors  # noqa: E402
from reportlab.lib.pagesizes import A4  # noqa: E402
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet  # noqa: E402
from reportlab.lib.units import mm  # noqa: E402
from reportlab.platypus import (  # noqa: E402
    PageBreak,
    Paragraph,
    SimpleDocTemplate,
    Spacer,
    Table,
    TableStyle,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "tests", "data", "corpus", "plans", "business-continuity-plan.pdf")
TITLE = "Business Continuity Plan"
TOTAL_PAGES = 3

styles = getSampleStyleSheet()
H1 = ParagraphStyle("H1", parent=styles["Heading1"], fontName="Helvetica-Bold", fontSize=18, spaceAfter=6)
H2 = ParagraphStyle("H2", parent=styles["Heading2"], fontName="Helvetica-Bold", fontSize=13, spaceBefore=10)
H3 = ParagraphStyle("H3", parent=styles["Heading3"], fontName="Helvetica-Bold", fontSize=11, spaceBefore=6)
BODY = ParagraphStyle("Body", parent=styles["BodyText"], fontName="Helvetica", fontSize=10, leading=13.5)
BULLET = ParagraphStyle("Bullet", parent=BODY, leftIndent=14, bulletIndent=4)
CELL = ParagraphStyle("Cell", parent=BODY, fontSize=9, leading=11)
CELL_B = ParagraphStyle("CellB", parent=CELL, fontName="Helvetica-Bold")


def p(text: str) -> Paragraph:
    return Paragraph(text, BODY)


def bullets(items: list[str]) -> list[Paragraph]:
    return [Paragraph(t, BULLET, bulletText="-") for t in items]


def table(rows: list[list[str]], widths: list[float]) -> Table:
    data = [[Paragraph(c, CELL_B if i == 0 else CELL) for c in row] for i, row in enumerate(rows)]
    t = Table(data, colWidths=[w * mm for w in widths], repeatRows=1)
    t.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.5, colors.grey),
                ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#dde6f0")),
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
            ]
        )
    )
    return t


def page_one() -> list:
    return [
        Paragraph("Harbourline Logistics B.V.", H3),
        Paragraph(TITLE, H1),
        table(
            [
                ["Document", "Owner", "Version", "Approved"],
                ["HL-PLN-OPS-001", "Annelies de Vries, Chief Operating Officer", "4.0", "18 March 2024"],
            ],
            [35, 75, 20, 35],
        ),
        Spacer(1, 6),
        Paragraph("1 Purpose", H2),
        p(
            "This plan describes how Harbourline Logistics keeps delivering for its customers when a "
            "serious disruption hits: the loss of a depot, a failure of a core IT system, a cyber attack, "
            "a pandemic, or the loss of key suppliers. It sets out who takes charge, which systems are "
            "restored first, where staff go if an office cannot be used, and how we communicate."
        ),
        Paragraph("2 Scope", H2),
        p(
            "The plan covers the Rotterdam head office, the depots at Rotterdam Waalhaven, Antwerp and "
            "Hamburg, and the IT services hosted in the two data centre rooms at Rotterdam and Amsterdam. "
            "Each depot keeps a local site recovery card that follows this plan."
        ),
        Paragraph("3 Roles and responsibilities", H2),
        Paragraph("3.1 Crisis Management Team", H3),
        p(
            "The Crisis Management Team (CMT) leads the response to any disruption declared under this "
            "plan. It is chaired by the Chief Operating Officer, Annelies de Vries; her deputy is the "
            "Operations Manager, Jonas Feld. The other members are:"
        ),
        *bullets(
            [
                "the Chief Information Security Officer (IT and cyber incidents);",
                "the Head of Finance (payments, insurance, emergency spending);",
                "the Head of People &amp; Culture (staff welfare and communication to staff);",
                "the site lead of the affected site.",
            ]
        ),
        Paragraph("3.2 Declaring a disruption", H3),
        p(
            "Any CMT member or the duty manager of a site may declare a business continuity incident. "
            "Once an incident is declared, the Crisis Management Team convenes within 1 hour, in person "
            "or on the bridge call number printed on the back of every CMT member's badge. The CMT may "
            "approve emergency spending of up to EUR 50,000 without further authorisation."
        ),
        PageBreak(),
    ]


def page_two() -> list:
    return [
        Paragraph("4 Recovery objectives", H2),
        p(
            "The recovery time objective (RTO) is the longest a system may be unavailable after an incident "
            "is declared. The recovery point objective (RPO) is the most data, measured in time, that may "
            "be lost. Systems are restored in the order of the priority column."
        ),
        Spacer(1, 4),
        table(
            [
                ["Priority", "System", "RTO", "RPO"],
                ["1", "Warehouse Management System (WMS)", "6 hours", "15 minutes"],
                ["2", "Transport planning and route optimisation", "8 hours", "1 hour"],
                ["3", "Customer tracking portal", "12 hours", "1 hour"],
                ["4", "E-mail and video calls", "24 hours", "4 hours"],
                ["5", "Finance ERP and payroll", "48 hours", "24 hours"],
                ["6", "Intranet and document archive", "5 days", "24 hours"],
            ],
            [18, 82, 28, 28],
        ),
        Spacer(1, 4),
        p(
            "Backups of the WMS are replicated every 15 minutes to the Amsterdam data centre room, where a "
            "standby copy can take over. The other systems are restored from nightly backups or from the "
            "supplier's own cloud service."
        ),
        Paragraph("5 Alternate site", H2),
        p(
            "If the Rotterdam head office cannot be used, office staff move to the backup office in "
            "Dordrecht, about 25 km away. It has 40 workstations with network access, a meeting room for "
            "the Crisis Management Team and a stock of loan laptops. The security company holds the keys "
            "and opens the building on a call from any CMT member."
        ),
        p(
            "Staff who are not needed at the backup office work from home. Depot staff move to the nearest "
            "other depot only when their site lead asks them to."
        ),
        Paragraph("5.1 Depot outages", H3),
        p(
            "If a depot is lost, its inbound freight is re-routed to the next nearest depot within "
            "24 hours; Antwerp and Rotterdam Waalhaven back each other up, and Hamburg is backed up by "
            "Rotterdam Waalhaven with a subcontracted cross-dock in Bremen."
        ),
        PageBreak(),
    ]


def page_three() -> list:
    return [
        Paragraph("6 Communication", H2),
        p(
            "Clear and early communication prevents a disruption from turning into a crisis of trust. "
            "The Head of People &amp; Culture sends a status message to all staff by SMS within 2 hours "
            "of the declaration, and then at least twice a day until the incident is closed."
        ),
        *bullets(
            [
                "Customers affected by delays are told by Customer Service within 3 hours of the declaration.",
                "Only the Chief Operating Officer or her deputy speaks to the press.",
                "Regulators and insurers are informed by the Head of Finance and the Data Protection Officer "
                "as the situation requires.",
            ]
        ),
        Paragraph("7 Testing and exercises", H2),
        p(
            "A plan that is not tested does not work. Harbourline holds a full business continuity "
            "exercise once a year in October, in which a real failover of the Warehouse Management "
            "System to the Amsterdam data centre room is carried out during a weekend. In addition, the "
            "Crisis Management Team runs a tabletop exercise twice a year, in April and in November, "
            "each time on a different scenario."
        ),
        p(
            "The findings of every exercise are recorded in an exercise report, and each improvement "
            "action gets an owner and a due date."
        ),
        Paragraph("8 Review", H2),
        p(
            "The Chief Operating Officer reviews this plan at least every 12 months, and after every real "
            "incident or major change to the sites or systems. The next scheduled review is due by "
            "31 March 2025."
        ),
        Spacer(1, 10),
        p("<i>End of document.</i>"),
    ]


def on_page(canvas, doc) -> None:
    canvas.saveState()
    canvas.setFont("Helvetica", 8)
    canvas.drawString(
        20 * mm,
        12 * mm,
        f"Harbourline Logistics - {TITLE} v4.0 - Internal - Page {doc.page} of {TOTAL_PAGES}",
    )
    canvas.restoreState()


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    doc = SimpleDocTemplate(
        out,
        pagesize=A4,
        leftMargin=20 * mm,
        rightMargin=20 * mm,
        topMargin=20 * mm,
        bottomMargin=22 * mm,
        title=f"Harbourline Logistics {TITLE}",
        author="Annelies de Vries",
        subject="Business continuity",
        invariant=1,
    )
    doc.build(page_one() + page_two() + page_three(), onFirstPage=on_page, onLaterPages=on_page)
    if doc.page != TOTAL_PAGES:
        print(f"make-sample-pdf: expected {TOTAL_PAGES} pages, got {doc.page}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
