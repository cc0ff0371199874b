"""What the gates use that is not a gate: parsers of tool output (ptxas reports, SASS/PTX listings), the fp32
attention reference, the perf verdicts, the API gate's case table. harness/gates/ holds the gates only."""
