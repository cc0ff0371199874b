"""CPU-planted faults (make selftest, and the CPU suite): for a gate whose fault the GPU cannot plant (a profiler
threshold the planted kernel faults do not cross for certain, a stall table no fault removes, a table, a second
sanitizer gate, a kernel built without TMA or wgmma, a second GPU), crafted input fed to the gate's real verdict:
a profile or log recorded from the planted program and this kernel (tests/fixtures/), or a table, an opcode list or
hashes made here. Each runner gives the planted input's status and, as its control, the clean input's.

Declared in gates/selftest.yaml (`cases`, plant `cpu`, arg: the runner's name below).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from harness.results import Status, combine
from harness.schema import Config
from harness.selftest_runs import Runner, spec_of

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def with_metric(text: str, metric: str, value: float, launches: int) -> str:
    """An ncu CSV export with exactly `launches` launches (the recorded ones repeated, renumbered), every one's
    `metric` set to `value`: the profile of a slower or faster kernel, as many launches as the gate profiles."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    header, units, *recorded = list(csv.reader(lines[start:]))
    col, ids = header.index(metric), header.index("ID")
    rows = [list(recorded[i % len(recorded)]) for i in range(launches)]
    for i, row in enumerate(rows):
        row[col], row[ids] = f"{value:.2f}", str(i)
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([header, units, *rows])
    return "\n".join(lines[:start]) + "\n" + out.getvalue()


def ncu_throughput(gate: str) -> Runner:
    """The gate's verdict on FlashCore's recorded prefill profile with its metric set 10 points under the gate's
    threshold (planted) or 10 over it, capped at 100 % (the control)."""

    def run(config: Config, out: Path, planted: bool) -> dict[str, Status]:
        from harness.gates.ncu import verdict_profile
        from harness.ncu.parse import parse_csv

        p = spec_of(config, gate).params
        value = p.min_pct - 10.0 if planted else min(100.0, p.min_pct + 10.0)
        text = with_metric((FIXTURES / "ncu" / "ours-prefill.csv").read_text(), p.metric, value, p.launch_count)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{gate}.csv").write_text(text)
        checks = verdict_profile("prefill-d128", parse_csv(text), p.metrics, p.metric, p.min_pct, p.kernel_filter,
                                 p.launch_count)
        return {gate: combine([c.status for c in checks])}

    return run


def stall_profile(planted: bool, tensor_metric: str, stall_regex: str, launches: int = 1) -> str:
    """FlashCore's recorded WarpStateStats profile (one prefill launch, repeated and renumbered to the `launches` the
    gate profiles; the capture has the sections only) with the tensor-pipe activity of its recorded prefill profile
    added, and with every stall reason n/a when planted: a profile whose stall table was not measured."""
    import re

    lines = (FIXTURES / "ncu" / "ours-prefill-stalls.csv").read_text().splitlines()
    header, units, *captured = list(csv.reader(lines))
    ids = header.index("ID")
    rows_of = [[*captured[i % len(captured)]] for i in range(launches)]
    for i, row in enumerate(rows_of):
        row[ids] = str(i)
    recorded = (FIXTURES / "ncu" / "ours-prefill.csv").read_text().splitlines()
    start = next(i for i, line in enumerate(recorded) if line.startswith('"ID"'))
    prefill_header, _, prefill = list(csv.reader(recorded[start:]))[:3]
    rows = [[*header, tensor_metric], [*units, "%"], *[[*row, prefill[prefill_header.index(tensor_metric)]]
                                                      for row in rows_of]]
    if planted:
        stalls = [i for i, name in enumerate(header) if re.fullmatch(stall_regex, name)]
        for row in rows[2:]:
            for i in stalls:
                row[i] = "n/a"
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return out.getvalue()


def ncu_stalls(config: Config, out: Path, planted: bool) -> dict[str, Status]:
    """ncu-stalls' verdict (its params, no baseline) on the stall profile above. The gate records and sets no
    threshold: its red is an ERROR on the stall table, given here as ncu-stalls/unmeasured FAIL (any other outcome
    of the planted profile, or a red control, stays what it is)."""
    from harness.gates.ncu_stalls import verdict_stalls
    from harness.ncu.parse import parse_csv

    p = spec_of(config, "ncu-stalls").params
    text = stall_profile(planted, p.tensor_metric, p.stall_metric_regex, p.launch_count)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ncu-stalls.csv").write_text(text)
    checks, _ = verdict_stalls("prefill-d128", parse_csv(text), p, None)
    status = combine([c.status for c in checks])
    unmeasured = any(c.metric == "warp_stalls" and c.status is Status.ERROR for c in checks)
    return {"ncu-stalls/unmeasured": Status.FAIL if status is Status.ERROR and unmeasured else status}


def sanitizer_log(gate: str) -> Runner:
    """The gate's verdict (the runner's judge_log, its params and the project's suppressions) on memcheck's log of
    the planted out-of-bounds write (planted) or of the planted program's clean mode (the control)."""

    def run(config: Config, out: Path, planted: bool) -> dict[str, Status]:
        from harness.sanitizer import runner
        from harness.sanitizer.suppressions import load_suppressions

        p = spec_of(config, gate).params
        mode, code = ("oob", runner.ERROR_EXITCODE) if planted else ("clean", 0)
        text = (FIXTURES / "sanitizer" / f"memcheck-{mode}.log").read_text()
        opts = runner.Options(timeout_s=p.timeout_s("memcheck"), padding=p.padding,
                              fail_on_warnings=p.fail_on_warnings,
                              suppressions=load_suppressions(Path.cwd() / p.suppressions))
        _, judgement = runner.judge_log("memcheck", text, opts, code, False, f"planted {mode}: done")
        return {gate: judgement.status}

    return run


def autotune_table(config: Config, out: Path, planted: bool) -> dict[str, Status]:
    """autotune-table's verdict on a table for this host with an entry for each of its workloads' buckets,
    measured on another kernel (planted: stale) or on this one (the control)."""
    from flashcore.tuning import DEFAULT, Entry, Table, dump_tables
    from harness.gates.autotune_table import Host, verdict_table
    from harness.tune.space import bucket

    spec = spec_of(config, "autotune-table")
    workloads = [config.workloads[n] for n in spec.params.workloads]
    host = Host("NVIDIA H100 80GB HBM3", 132, "this-kernel", {d: (128,) for d in (64, 128, 256)})
    table = Table(host.gpu, host.sm_count, "another-kernel" if planted else host.kernel_id)
    for w in workloads:
        table.entries[bucket(w)] = Entry(bucket(w), DEFAULT, 1.0)
    checks = verdict_table("tuned.yaml", dump_tables([table]), host, workloads)
    return {"autotune-table": combine([c.status for c in checks])}


def structure(gate: str) -> Runner:
    """The gate's verdict on a kernel matching its pattern whose SASS has one opcode, the first alternative of each
    required instruction, and nothing forbidden (the control), or only the forbidden ones and a plain load instead
    (planted: a kernel back on mma.sync and LDG)."""

    def run(config: Config, out: Path, planted: bool) -> dict[str, Status]:
        from harness.gates.structure import verdict_structure

        p = spec_of(config, gate).params
        wanted = {instr.split("|")[0] for instr in p.sass_required}
        ops = {*p.sass_forbidden, "LDG"} if planted else wanted
        kernels = {f"{p.kernel_pattern}<128>": ops, "other_kernel": wanted}
        checks = verdict_structure(kernels, p.kernel_pattern, p.sass_required, p.sass_forbidden, "planted SASS")
        return {gate: combine([c.status for c in checks])}

    return run


def cross_gpu(config: Config, out: Path, planted: bool) -> dict[str, Status]:
    """determinism-gpus' verdicts over the hashes of two GPUs of one kind: the second GPU's default-mode result
    differs in its last bits (planted) or is the same (the control). The GPU run needs two GPUs."""
    from harness.gates.determinism_gpus import Device, verdicts

    devices = [Device(0, "NVIDIA H200", 132), Device(1, "NVIDIA H200", 132)]
    default = {0: "a1", 1: "a2" if planted else "a1"}
    checks, _ = verdicts("prefill-d128", devices, default, {(0, 0): "d", (1, 0): "d"})
    return {"determinism-gpus": combine([c.status for c in checks])}


RUNNERS: dict[str, Runner] = {
    "ncu-sm": ncu_throughput("ncu-sm"),
    "ncu-sm-pipeline": ncu_throughput("ncu-sm-pipeline"),
    "ncu-stalls": ncu_stalls,
    "sanitizer-all": sanitizer_log("sanitizer-all"),
    "autotune-table": autotune_table,
    "structure-tma": structure("structure-tma"),
    "structure-wgmma": structure("structure-wgmma"),
    "determinism-gpus": cross_gpu,
}
