"""What ``trident verify`` prints: the verdict table and JUnit XML (``transactional.ops.verify``)."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from transactional.ops.verify.model import VerifyReport
from transactional.ops.verify.upgrade import refusal_lines

__all__ = ["format_table", "junit_xml"]


# -- what it prints ---------------------------------------------------------------------------------

_COLUMNS = ("fault", "kills", "restarts", "replays", "keys", "missing", "doubled", "different", "verdict")


def format_table(report: VerifyReport) -> str:
    """The verdict table, then the examples of each failed run and what was not checked."""
    rows = [_COLUMNS]
    for r in report.runs:
        kills = f"{r.kills}/{r.kills_planned}" if r.kills_planned else "0"
        rows.append((r.fault, kills, str(r.restarts), str(r.replays), str(r.compared), str(r.missing), str(r.doubled),
                     str(r.different + r.extra), r.verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = _head(report)
    if report.refused:
        return "\n".join(lines)
    for j, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                                    strict=True))))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    for r in report.runs:
        for ex in r.examples:
            lines.append(f"  {r.fault}: {ex}")
        for where in r.where:
            lines.append(f"  {r.fault}: where: {where}")
        if r.note:
            lines.append(f"  {r.fault}: {r.note}")
    for note in report.unchecked:
        lines.append(f"not checked: {note}")
    lines.append(_verdict_line(report))
    return "\n".join(lines)


def _verdict_line(report: VerifyReport) -> str:
    """The last line: the verdict, how many runs matched, how many kills."""
    if report.verdict == "UNCHECKED":
        return (f"UNCHECKED: nothing was compared in {len(report.runs)} runs, so nothing is proven (not a pass); "
                f"{report.kills} driver kills in {report.secs:.1f} s")
    return (f"{report.verdict}: {sum(r.verdict == 'PASS' for r in report.runs)} of {len(report.runs)} runs "
            f"matched the reference; {report.kills} driver kills in {report.secs:.1f} s")


def _head(report: VerifyReport) -> list[str]:
    """The lines above the table: the topology, its spouts and states, an upgrade's changes."""
    ran = "" if report.refused else f"; reference {report.reference_txids} txids, {report.reference_keys} keys"
    lines = [f"trident verify {report.file}: topology {report.topology_id!r}, {report.kind}{ran}"]
    lines += [f"  {s}" for s in report.spouts + report.states]
    return lines + refusal_lines(report)


def junit_xml(report: VerifyReport) -> str:
    """The report as a JUnit XML test suite: one test case per run (``--junit FILE``)."""
    cases = []
    for r in report.runs:
        body = ""
        if r.verdict in ("FAIL", "ERROR", "UNCHECKED"):
            text = "\n".join(r.where + r.examples + ([r.note] if r.note else []))
            body = (f"<failure message={quoteattr(f'{r.missing} missing, {r.doubled} doubled, {r.different} different, {r.extra} extra')}>"
                    f"{escape(text)}</failure>")
        elif r.verdict == "SKIP":
            body = f"<skipped message={quoteattr(r.note)}/>"
        cases.append(f'  <testcase classname={quoteattr("trident.verify." + report.topology_id)} '
                     f'name={quoteattr(r.fault)} time="{r.secs:.1f}">{body}</testcase>')
    failures = sum(r.verdict in ("FAIL", "ERROR", "UNCHECKED") for r in report.runs)
    skipped = sum(r.verdict == "SKIP" for r in report.runs)
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name={quoteattr("trident verify " + report.file)} '
            f'tests="{len(report.runs)}" failures="{failures}" skipped="{skipped}" time="{report.secs:.1f}">\n'
            + "\n".join(cases) + "\n</testsuite>\n")
