#!/usr/bin/env python3
"""Change an IMAP folder the way people do between two syncs, for the mailbox-source tests.

  scripts/sources/imap-change.py HOST PORT USER PASSWORD delete FOLDER SUBJECT
  scripts/sources/imap-change.py HOST PORT USER PASSWORD move FOLDER SUBJECT TO_FOLDER

`delete` flags every message of FOLDER whose Subject contains SUBJECT \\Deleted and expunges it;
`move` copies them to TO_FOLDER (created when missing) and then deletes them from FOLDER. Plain
IMAP on loopback (the server of scripts/sources/imap-launch.sh). Prints `N messages` on stdout;
exits 1 when no message matched.
"""
import imaplib
import sys


def quote(folder):
    return '"' + folder.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    if len(sys.argv) < 8:
        sys.exit(__doc__)
    host, port, user, password, action, folder, subject = sys.argv[1:8]
    m = imaplib.IMAP4(host, int(port), timeout=30)
    m.login(user, password)
    typ, _ = m.select(quote(folder))
    if typ != "OK":
        sys.exit(f"[imap-change] SELECT {folder}: {typ}")
    typ, data = m.uid("SEARCH", "CHARSET", "UTF-8", "SUBJECT", quote(subject))
    uids = (data[0] or b"").split()
    if not uids:
        sys.exit(f"[imap-change] no message of {folder} has {subject!r} in its subject")
    uid_set = b",".join(uids).decode()
    if action == "move":
        to = sys.argv[8]
        m.create(quote(to))
        typ, data = m.uid("COPY", uid_set, quote(to))
        if typ != "OK":
            sys.exit(f"[imap-change] COPY to {to}: {typ} {data}")
    elif action != "delete":
        sys.exit(__doc__)
    m.uid("STORE", uid_set, "+FLAGS.SILENT", "(\\Deleted)")
    m.expunge()
    m.logout()
    print(f"{len(uids)} messages")


if __name__ == "__main__":
    main()
