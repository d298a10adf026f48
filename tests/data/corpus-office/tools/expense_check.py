#!/usr/bin/env python3
"""Check a travel expense claim against the per-diem rates and hotel caps.

Finance runs this before a claim is approved (Travel and Expenses Policy, section 4). The rates are
NOT copied here: they are read from the table in policies/travel-and-expenses.md, so the policy stays
the single source of truth and this tool can never drift from it.

Input is a CSV file with one line per day away from home:

    date,city,currency,meals,hotel
    2024-05-13,Hamburg,EUR,58.40,165.00
    2024-05-14,Hamburg,EUR,71.10,0

Rules applied per line:
  * meals up to the daily allowance: OK;
  * meals over the allowance by at most TOLERANCE (10%): WARN, paid after the approver confirms;
  * meals over the allowance by more than TOLERANCE: REJECT, only the allowance is paid;
  * a hotel night above the cap: WARN, unless the night was booked in TripDesk (which records the
    exception itself), which we cannot see from the CSV;
  * a claim line dated on a Saturday or Sunday: WARN, so the approver checks the trip needed it.

Usage: expense_check.py CLAIM.csv [--policy PATH]. Exit status 0 if nothing was rejected, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import re
import sys
from dataclasses import dataclass

# Share of the daily allowance a claim may exceed before it is rejected outright.
TOLERANCE = 0.10

DEFAULT_POLICY = os.path.join(os.path.dirname(__file__), "..", "policies", "travel-and-expenses.md")
FALLBACK_CITY = "Any other city"


@dataclass(frozen=True)
class Rate:
    currency: str
    meals: float  # daily meal allowance
    hotel: float  # hotel cap per night


def parse_money(cell: str) -> tuple[str, float]:
    """'EUR 1,000' -> ('EUR', 1000.0)."""
    m = re.fullmatch(r"\s*([A-Z]{3})\s+([\d,]+(?:\.\d+)?)\s*", cell)
    if not m:
        raise ValueError(f"not an amount: {cell!r}")
    return m.group(1), float(m.group(2).replace(",", ""))


def load_rates(policy_path: str) -> dict[str, Rate]:
    """Read the per-diem table (the one whose header starts with '| City |') from the policy."""
    rates: dict[str, Rate] = {}
    in_table = False
    with open(policy_path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("| City |"):
                in_table = True
                continue
            if not in_table:
                continue
            if not line.startswith("|"):
                break  # the first non-table line ends the table
            cells = [c.strip() for c in line.strip("|").split("|")]
            if set(cells[0]) <= {"-", ":"}:
                continue  # the |---|---| separator row
            cur, meals = parse_money(cells[1])
            cur2, hotel = parse_money(cells[2])
            if cur != cur2:
                raise ValueError(f"mixed currencies for {cells[0]}")
            rates[cells[0]] = Rate(cur, meals, hotel)
    if FALLBACK_CITY not in rates:
        raise ValueError(f"no per-diem table with an {FALLBACK_CITY!r} row in {policy_path}")
    return rates


def check_line(row: dict[str, str], rates: dict[str, Rate]) -> tuple[str, list[str]]:
    """Return (verdict, reasons) for one claim line; verdict is OK, WARN or REJECT."""
    rate = rates.get(row["city"].strip(), rates[FALLBACK_CITY])
    reasons: list[str] = []
    verdict = "OK"
    if row["currency"].strip() != rate.currency:
        return "REJECT", [f"claimed in {row['currency']}, the rate for this city is in {rate.currency}"]

    meals = float(row["meals"] or 0)
    if meals > rate.meals * (1 + TOLERANCE):
        verdict = "REJECT"
        reasons.append(f"meals {meals:.2f} exceed the allowance {rate.meals:.2f} by more than {TOLERANCE:.0%}")
    elif meals > rate.meals:
        verdict = "WARN"
        reasons.append(f"meals {meals:.2f} over the allowance {rate.meals:.2f}, within tolerance")

    hotel = float(row["hotel"] or 0)
    if hotel > rate.hotel:
        verdict = "REJECT" if verdict == "REJECT" else "WARN"
        reasons.append(f"hotel {hotel:.2f} above the cap {rate.hotel:.2f}: was it booked in TripDesk?")

    if dt.date.fromisoformat(row["date"].strip()).weekday() >= 5:
        verdict = "REJECT" if verdict == "REJECT" else "WARN"
        reasons.append("weekend day: approver to confirm the trip required it")
    return verdict, reasons


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check a travel expense claim against the per-diem table.")
    ap.add_argument("claim", help="CSV with columns date,city,currency,meals,hotel")
    ap.add_argument("--policy", default=DEFAULT_POLICY, help="the travel policy markdown file")
    args = ap.parse_args(argv)

    rates = load_rates(args.policy)
    rejected = 0
    with open(args.claim, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            verdict, reasons = check_line(row, rates)
            rejected += verdict == "REJECT"
            print(f"{row['date']} {row['city']:<12} {verdict:<6} {'; '.join(reasons)}")
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main())
