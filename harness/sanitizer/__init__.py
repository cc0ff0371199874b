"""compute-sanitizer support for the sanitizer gate (harness/gates/sanitizer.py).

model (pure data) <- parser (log text -> facts) <- verdict (facts + how the run ended -> PASS/FAIL/ERROR);
suppressions (the reviewed file in gates/); runner (command line, timeout, raw log); cli (offline re-judge);
cost (a run's modelled seconds), parallel (runs at once, parts), budget (sanitizer-all's), shrink (racecheck's shape).
"""
