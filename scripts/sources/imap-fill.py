#!/usr/bin/env python3
"""Fill an IMAP folder for the mailbox-source tests and benchmark.

APPENDs RFC 822 messages (.eml files) to FOLDER on an IMAP server, creating the folder (and its
parents) when it is missing; or, with --generate N, N synthetic messages instead: varied subjects,
senders, dates and bodies (plain, some multipart/alternative with HTML), every third one with an
attachment in turn .txt, .md, .csv and .html, deterministic for a given --seed, so that a test can
know what the catalog should hold (--save DIR also writes each generated message there as
NNNNN.eml). Only python3's standard library (imaplib, email). The server is normally the one of
scripts/sources/imap-launch.sh (user archive / archive-pw; hierarchy separator "/").

  scripts/sources/imap-fill.py [--starttls CA|--ssl CA] HOST PORT USER PASSWORD FOLDER FILE...
  scripts/sources/imap-fill.py [--starttls CA|--ssl CA] HOST PORT USER PASSWORD FOLDER --generate N
      [--seed S] [--save DIR]

--starttls CA upgrades the connection with STARTTLS trusting CA (DIR/tls/ca.pem of the launcher),
--ssl CA connects with implicit TLS (the launcher's TLS_PORT); without either it talks plain IMAP
on loopback. Each message keeps its Date header as its INTERNALDATE. On stdout, one line:
`appended N to FOLDER uidvalidity=V uids=FIRST..LAST` (the UIDs from the server's APPENDUID).
"""
import argparse
import email
import email.policy
import email.utils
import imaplib
import random
import re
import ssl
import sys
import time
from email.message import EmailMessage
from pathlib import Path

TOPICS = [
    ("Quarterly audit", "the quarterly audit of the payment controls"),
    ("Data retention", "the retention schedule for customer records"),
    ("Vendor review", "the annual review of the hosting vendor"),
    ("Incident report", "the incident on the reporting pipeline last week"),
    ("Policy update", "the revised acceptable-use policy"),
    ("Access recertification", "the recertification of privileged access"),
    ("Training reminder", "the mandatory anti-bribery training"),
    ("Contract renewal", "the renewal terms of the support contract"),
    ("Risk register", "the new entries in the operational risk register"),
    ("Board pack", "the compliance section of the board pack"),
    ("Sanctions screening", "the sanctions screening backlog"),
    ("GDPR request", "a subject access request received on Monday"),
]
PEOPLE = ["Ada Moreau", "Bram de Vries", "Chiara Rossi", "Dmitri Volkov", "Elif Kaya",
          "Femi Adeyemi", "Greta Lindqvist", "Hiro Tanaka", "Ines Duarte", "Jonas Weber"]
SENTENCES = [
    "Please find the details below and let me know if anything is missing.",
    "The deadline for comments is the end of next week.",
    "We agreed that the owner of each control signs off on the evidence.",
    "Two findings remain open and are tracked in the register.",
    "The figures were reconciled against the ledger on the first of the month.",
    "Legal asked for the wording of clause {n} to be reviewed again.",
    "The exception expires after {n} days unless it is renewed.",
    "I attached the latest version; the changes are marked.",
    "Nothing in this message is confidential beyond the usual internal handling.",
    "Reference number {ref} should be quoted in any reply.",
]
ATTACHMENTS = ["txt", "md", "csv", "html"]


def sentence(rng, i):
    return rng.choice(SENTENCES).format(n=rng.randint(2, 90), ref=f"CMP-{10000 + i}")


def attachment(kind, i, topic):
    title, phrase = topic
    if kind == "txt":
        return (f"notes-{i}.txt", "plain",
                f"Notes on {phrase}.\nItem {i}: reviewed, no further action.\n")
    if kind == "md":
        return (f"summary-{i}.md", "markdown",
                f"# {title} {i}\n\n## Findings\n\n- Finding {i}.1 about {phrase}\n"
                f"- Finding {i}.2: owner to confirm\n")
    if kind == "csv":
        rows = "\n".join(f"{i}-{k},{title},{k * 17 % 100},open" for k in range(1, 6))
        return (f"items-{i}.csv", "csv", f"id,topic,score,status\n{rows}\n")
    return (f"page-{i}.html", "html",
            f"<html><head><title>{title} {i}</title></head><body><h1>{title} {i}</h1>"
            f"<p>This page is about {phrase}.</p></body></html>\n")


def generate(i, rng):
    topic = TOPICS[i % len(TOPICS)]
    sender, recipient = rng.sample(PEOPLE, 2)
    msg = EmailMessage()
    msg["From"] = email.utils.formataddr((sender, sender.split()[0].lower() + "@example.test"))
    msg["To"] = email.utils.formataddr((recipient, "compliance@example.test"))
    msg["Subject"] = f"{topic[0]} #{i}: {rng.choice(['question', 'follow-up', 'draft', 'final', 'minutes'])}"
    # Dates spread over 2024, one message every few hours, in order.
    msg["Date"] = email.utils.formatdate(1704067200 + i * 3 * 3600 + rng.randint(0, 3000))
    msg["Message-ID"] = f"<gen-{i}@ragbox.test>"
    paras = [f"Hello {recipient.split()[0]},",
             f"This is about {topic[1]} (message {i}).",
             " ".join(sentence(rng, i) for _ in range(rng.randint(2, 6))),
             f"Regards,\n{sender}"]
    text = "\n\n".join(paras) + "\n"
    msg.set_content(text)
    if i % 5 == 1:
        html = "".join(f"<p>{p}</p>" for p in paras)
        msg.add_alternative(f"<html><body>{html}</body></html>\n", subtype="html")
    if i % 3 == 0:
        name, subtype, body = attachment(ATTACHMENTS[(i // 3) % 4], i, topic)
        msg.add_attachment(body, subtype=subtype, filename=name)
    return msg.as_bytes(policy=email.policy.SMTP)


def internal_date(raw):
    msg = email.message_from_bytes(raw, policy=email.policy.compat32)
    parsed = email.utils.parsedate_tz(msg.get("Date", "") or "")
    if parsed is None:
        return None
    return imaplib.Time2Internaldate(email.utils.mktime_tz(parsed))


def quote(folder):
    return '"' + folder.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("user")
    ap.add_argument("password")
    ap.add_argument("folder")
    ap.add_argument("files", nargs="*", type=Path)
    tls = ap.add_mutually_exclusive_group()
    tls.add_argument("--starttls", metavar="CA")
    tls.add_argument("--ssl", metavar="CA")
    ap.add_argument("--generate", type=int, metavar="N")
    ap.add_argument("--seed", type=int, default=64)
    ap.add_argument("--save", type=Path, metavar="DIR")
    args = ap.parse_args()
    if (args.generate is None) == (not args.files):
        ap.error("give either FILE... or --generate N")

    if args.ssl:
        ctx = ssl.create_default_context(cafile=args.ssl)
        m = imaplib.IMAP4_SSL(args.host, args.port, ssl_context=ctx, timeout=30)
    else:
        m = imaplib.IMAP4(args.host, args.port, timeout=30)
        if args.starttls:
            m.starttls(ssl_context=ssl.create_default_context(cafile=args.starttls))
    m.login(args.user, args.password)
    typ, data = m.create(quote(args.folder))
    if typ != "OK" and b"ALREADYEXISTS" not in b" ".join(d or b"" for d in data):
        sys.exit(f"[imap-fill] CREATE {args.folder}: {typ} {data}")

    if args.generate is not None:
        rng = random.Random(args.seed)
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
        def messages():
            for i in range(args.generate):
                raw = generate(i, rng)
                if args.save:
                    (args.save / f"{i:05d}.eml").write_bytes(raw)
                yield f"generated #{i}", raw
    else:
        def messages():
            for f in args.files:
                yield str(f), f.read_bytes()

    count, uidvalidity, uids = 0, None, []
    started = time.monotonic()
    for name, raw in messages():
        # IMAP wants CRLF line ends in a literal.
        raw = re.sub(rb"\r?\n", b"\r\n", raw)
        typ, data = m.append(quote(args.folder), None, internal_date(raw), raw)
        if typ != "OK":
            sys.exit(f"[imap-fill] APPEND {name}: {typ} {data}")
        found = re.search(rb"APPENDUID (\d+) (\d+)", data[0] or b"")
        if found:
            uidvalidity = int(found.group(1))
            uids.append(int(found.group(2)))
        count += 1
    m.logout()
    span = f"{uids[0]}..{uids[-1]}" if uids else "?"
    print(f"appended {count} to {args.folder} uidvalidity={uidvalidity} uids={span}")
    print(f"[imap-fill] {count} messages in {time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
