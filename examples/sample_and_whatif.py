"""Synthesize a Support-like trace, take a SHRiNK sample, and ask which mapping suits it.

python examples/sample_and_whatif.py [OUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import samplers
from extrapolate.calibration import load_calibration
from extrapolate.whatif import resolve_workload, whatif
from shrink.machine import Machine
from shrink.synth import SupportParams, build_site, synth_support

HERE = Path(__file__).resolve().parent


def main(out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    params = SupportParams(dynamic_fraction=0.05)
    trace = synth_support(200, 120.0, seed=3, params=params, site=build_site(params, 200))
    sample = samplers.sample(trace, 0.25, seed=7, level="session")
    info, sinfo = trace.info(), sample.info()
    print(
        f"trace: {info.sessions} sessions, {info.request_rate:.0f} req/s; sample: "
        f"{sinfo.sessions} sessions, {sinfo.request_rate:.0f} req/s "
        f"(alpha {sample.meta['alpha']}, seed {sample.meta['seed']})"
    )
    path = sample.write_parquet(out / "support-25.parquet")
    model = load_calibration("published")
    machine = Machine.read_toml(HERE / "machines" / "nehalem-2s.toml")
    pred = whatif(machine, resolve_workload(str(path), model), model, sweep=False)
    for name, m in pred.mappings.items():
        mean = m.stats["mean"]
        print(f"{name:20s} MAT {mean.mat:>8,.0f} req/s  [{mean.ci[0]:,.0f}, {mean.ci[1]:,.0f}]")
    print(f"recommended: {pred.recommended} - {pred.reason}")
    return pred.recommended


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("whatif-out"))
