"""PNG charts of the benchmark results, for the documentation.

``run_all.py`` calls :func:`write_charts` after a run; run this module alone to
draw them again from the JSON results without running anything:

    python benchmarks/charts.py [--consume benchmarks/results/run_all.json]
        [--rebalance benchmarks/results/rebalance.json] [--out docs/img]

Two charts:

* ``consume.png``: records/s of every client for each value size and codec
  (the median of the runs, as in the table of ``docs/benchmarks.md``): the
  gengroup clients in blues, the other Python clients in their own colours,
  Apache Kafka's Java tool (the ceiling) in gray;
* ``rebalance.png``: the moved partitions' longest gap for each client and
  protocol, one panel per membership change (join, leave, kill).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
IMG = HERE.parent / "docs" / "img"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


#: Each consume client's colour: gengroup's in blues, Java's ceiling in gray.
CLIENT_COLORS = {
    "gengroup-trio": "#08519c",
    "gengroup-asyncio": "#3182bd",
    "gengroup-arrow": "#9ecae1",
    "aiokafka": "tab:orange",
    "confluent-kafka": "tab:green",
    "kafka-python": "tab:purple",
    "java": "tab:gray",
}


def consume_chart(results: dict[str, Any], path: Path) -> Path:
    """Grouped bars: one group per (value size, codec), one bar per client."""
    plt = _pyplot()
    cases = results["cases"]
    clients = list(dict.fromkeys(name for case in cases for name in case["clients"]))
    width = 0.8 / max(1, len(clients))
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for i, name in enumerate(clients):
        xs = [c + (i - (len(clients) - 1) / 2) * width for c in range(len(cases))]
        rates = [case["clients"].get(name, {}).get("rate", 0) / 1000 for case in cases]
        label = f"{name} (ceiling)" if name == "java" else name
        ax.bar(xs, rates, width, label=label, color=CLIENT_COLORS.get(name))
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"{case['value_size']} B, {case['codec']}" for case in cases])
    ax.set_ylabel("thousand records/s")
    ax.set_title(
        f"Consumer throughput, one member, {results['meta']['partitions']} partitions "
        f"(median of {results['meta']['repeat']})"
    )
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def rebalance_chart(results: dict[str, Any], path: Path) -> Path:
    """One panel per case: each configuration's moved-partition gap (median)."""
    plt = _pyplot()
    cases = results["cases"]
    fig, axes = plt.subplots(1, len(cases), figsize=(4 * len(cases), 4), squeeze=False)
    for ax, (case, configs) in zip(axes[0], cases.items(), strict=True):
        names = list(configs)
        gaps = [configs[name]["median"]["moved_gap"] * 1000 for name in names]
        colors = ["tab:blue" if name.startswith("gengroup") else "tab:gray" for name in names]
        ax.barh(names, gaps, color=colors)
        ax.invert_yaxis()
        ax.set_title(f"a member {case}s" if case != "kill" else "a member is killed")
        ax.set_xlabel("moved partitions' longest gap, ms")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle("Rebalance cost (median; lower is better)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_charts(
    consume: Path | None = None, rebalance: Path | None = None, out: Path = IMG
) -> list[Path]:
    """Draw the charts of the result files that exist; returns the files written."""
    written = []
    if consume is not None and consume.exists():
        written.append(consume_chart(json.loads(consume.read_text()), out / "consume.png"))
    if rebalance is not None and rebalance.exists():
        written.append(rebalance_chart(json.loads(rebalance.read_text()), out / "rebalance.png"))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--consume", type=Path, default=HERE / "results" / "run_all.json")
    parser.add_argument("--rebalance", type=Path, default=HERE / "results" / "rebalance.json")
    parser.add_argument("--out", type=Path, default=IMG)
    args = parser.parse_args()
    for path in write_charts(args.consume, args.rebalance, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
