"""What the first screen of the HTML report shows: the failing checks (one line each), FlashCore's speed ratios from
the perf gates, the Nsight Compute throughput figures; and the short forms of long names and messages."""

from __future__ import annotations

import re
from typing import Any

from harness.render.format import VERDICT_WORD, fmt_number
from harness.results import RunResult, Status

MAX_ATTENTION = 40  # failing causes listed on the first screen; the rest are counted
SHORT_MESSAGE = 180  # characters of a message shown before the rest is folded


def short_text(text: str, limit: int = SHORT_MESSAGE) -> str:
    """The first line of `text`, cut to `limit` characters with an ellipsis."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit and line == text.strip() else line[: limit - 1].rstrip() + "…"


def short_name(name: str) -> str:
    """A kernel name a reviewer can read: Itanium-mangled names (_ZN9flashcore30attention...ILi256E...) become
    `flashcore::attention_forward_wgmma_kernel<…>`; demangled ones lose `void`, the parameter list and the
    namespaces inside template arguments. Anything else is returned as is."""
    if name.startswith("_ZN"):
        parts, i = [], 3
        while i < len(name) and name[i].isdigit():
            j = i
            while name[j].isdigit():
                j += 1
            n = int(name[i:j])
            parts.append(name[j:j + n])
            i = j + n
        if parts:
            return "::".join(parts) + ("<…>" if name[i:i + 1] == "I" else "")
        return name
    s = name.removeprefix("void ")
    depth, cut = 0, len(s)
    for k, ch in enumerate(s):  # drop the parameter list: the first "(" outside template brackets
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            cut = k
            break
    s = s[:cut]
    if "<" in s:
        head, _, args = s.partition("<")
        s = head + "<" + re.sub(r"\b\w+::", "", args)
    return s


def attention(run: RunResult) -> tuple[list[dict[str, Any]], int]:
    """Each failing cause once, errors first; (shown, how many more). A cause is a message shared by failing and
    erroring checks (and gates that failed without any): 17 checks of two gates that all say "the stored run was
    measured on another GPU" are one row naming both gates, x17, and the first check; a check without a message is a
    cause of its own."""
    rows: dict[tuple[str, ...], dict[str, Any]] = {}

    def add(gate: str, status: Status, what: str, message: str) -> None:
        text = short_text(message)
        key = (status.value, text) if text else (status.value, gate, what)
        row = rows.setdefault(key, {"gates": [], "status": status.value, "word": VERDICT_WORD[status], "what": what,
                                    "message": text, "count": 0})
        row["count"] += 1
        if gate not in row["gates"]:
            row["gates"].append(gate)

    for g in run.gates:
        bad = [c for c in g.checks if c.status in (Status.FAIL, Status.ERROR)]
        if g.status in (Status.FAIL, Status.ERROR) and not bad:
            add(g.name, g.status, "", g.message)
        for c in bad:
            what = f"{short_name(c.workload)} · {c.metric}"
            if c.measured is not None:
                what += f": {fmt_number(c.measured)}"
                if c.threshold is not None:
                    what += f" (needs {c.comparison} {fmt_number(c.threshold)})"
            add(g.name, c.status, what, c.message)
    out = [{**r, "gate": r["gates"][0], "what": r["what"] + (f" and {r['count'] - 1} more" if r["count"] > 1 else "")}
           for r in rows.values()]
    out.sort(key=lambda r: r["status"] != "error")  # errors (no verdict at all) first; stable otherwise
    return out[:MAX_ATTENTION], max(0, len(out) - MAX_ATTENTION)


def speed(run: RunResult) -> tuple[list[dict[str, Any]], str | None]:
    """FlashCore's paired speed against each baseline, per workload, from the perf and scaling gates (first
    measurement of a workload wins); and the first ratio chart (inline SVG) they drew."""
    rows: dict[str, dict[str, Any]] = {}
    chart = None
    for g in run.gates:
        if not (g.name.startswith("perf-") or g.name == "scaling"):
            continue
        chart = chart or (g.details.get("plots") or {}).get("ratio_svg")
        for w in g.details.get("workloads") or []:
            if w.get("name") in rows:
                continue
            by = {r.get("backend"): r for r in w.get("rows", [])}
            ours = by.get("flashcore") or {}
            rows[w["name"]] = {"name": w["name"], "shape": w.get("shape", ""), "unit": w.get("unit", ""),
                               "ours": ours.get("throughput"),
                               **{b: (by.get(b) or {}).get("ours_speedup") for b in ("fa3", "cudnn", "fa2")}}
    return list(rows.values()), chart


def ncu_figures(run: RunResult) -> list[dict[str, str]]:
    """The judged Nsight Compute throughput checks (ncu-dram, ncu-sm, ...), one line each."""
    out = []
    for g in run.gates:
        if not g.name.startswith("ncu-"):
            continue
        for c in g.checks:
            if "throughput" in c.metric and c.measured is not None:
                out.append({"gate": g.name, "workload": c.workload, "metric": c.metric.split("__")[0].upper(),
                            "measured": fmt_number(c.measured), "threshold": fmt_number(c.threshold),
                            "comparison": c.comparison, "status": c.status.value, "word": VERDICT_WORD[c.status]})
    return out
