"""Where a classic rebalance's time goes, step by step, client by client.

``bench_rebalance.py`` measures what a rebalance costs (the longest gap in a
partition's consumption); this script runs the same runs and says where
that time went. The broker it starts logs every group request it completes
(Kafka's request logger: heartbeats, OffsetCommit, JoinGroup, SyncGroup,
OffsetFetch, LeaveGroup; not Fetch, whose volume would load the broker),
each with the member's client id, so every client is timed by the same
clock, the broker's, and none needs instrumenting. For each member that
stays in the group (the three of a join, the three survivors of a leave or
a kill), from the heartbeat answered REBALANCE_IN_PROGRESS that told it of
the rebalance:

* **beat→commit**: that answer to the arrival of the member's OffsetCommit
  (the offsets of the partitions it gives up), if it sent one before
  rejoining;
* **commit→join**: that commit's answer to the arrival of its JoinGroup;
* **beat→join**: the answer to the arrival of its JoinGroup: what the
  member took to stop, commit and rejoin (the group's JoinGroup answers
  wait for its slowest member);
* **join wait**: its JoinGroup's arrival to its answer (waiting for the
  others);
* **join→sync**: the JoinGroup answer to the arrival of its SyncGroup,
  separately for the leader (which assigns the partitions first) and the
  followers;
* **sync→record**: the SyncGroup answer to the first record the member
  reported after its new assignment (the member's clock: the same host).

The log's times are milliseconds (a request's arrival is its completion less
its total time, which the log gives to the microsecond), so each figure is
good to about a millisecond; the tables show medians over every staying
member of every run. The classic protocol only (eager and cooperative
configurations). Results go to ``benchmarks/results/rebalance_steps.json``.
Nothing is asserted.

Usage: python benchmarks/bench_rebalance_steps.py [--repeat 5]
       [--configs gengroup-eager,aiokafka-eager,...] [--case join]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_rebalance as rebalance

HERE = Path(__file__).resolve().parent
#: The requests the broker logs: the members' group requests.
GROUP_APIS = (
    "HEARTBEAT",
    "OFFSET_COMMIT",
    "JOIN_GROUP",
    "SYNC_GROUP",
    "OFFSET_FETCH",
    "LEAVE_GROUP",
)
STEPS = (
    "beat→commit",
    "commit→join",
    "beat→join",
    "join wait",
    "join→sync leader",
    "join→sync follower",
    "sync→record",
)
REBALANCE_IN_PROGRESS = 27


@dataclass(frozen=True)
class Request:
    """One request the broker completed, its times in seconds since the epoch."""

    api: str
    arrived: float
    answered: float
    error: int | None
    body: dict[str, Any]


def read_log(path: Path) -> dict[str, list[Request]]:
    """Every logged request, by client id, in the order the broker completed them."""
    by_client: dict[str, list[Request]] = defaultdict(list)
    with path.open(errors="replace") as lines:
        for line in lines:
            stamp, _, text = line.partition(" Completed request:")
            if not text or not stamp.isdigit():
                continue
            entry = json.loads(text)
            header = entry["requestHeader"]
            answered = int(stamp) / 1000
            response = entry.get("response") or {}
            by_client[header["clientId"]].append(
                Request(
                    header["requestApiKeyName"],
                    answered - entry["totalTimeMs"] / 1000,
                    answered,
                    response.get("errorCode"),
                    response,
                )
            )
    return by_client


def member_steps(
    requests: list[Request], events: dict[str, Any], change: float
) -> dict[str, float]:
    """The steps of one staying member's first rebalance after ``change`` (seconds)."""

    def first(api: str, after: float) -> Request | None:
        return next((r for r in requests if r.api == api and r.arrived >= after), None)

    beat = next(
        (
            r
            for r in requests
            if r.api == "HEARTBEAT" and r.arrived >= change and r.error == REBALANCE_IN_PROGRESS
        ),
        None,
    )
    if beat is None:
        return {}
    # Stamps are whole milliseconds: a request sent within the beat's
    # millisecond may be logged as arriving just before its answer.
    join = first("JOIN_GROUP", beat.answered - 0.001)
    if join is None:
        return {}
    steps = {"beat→join": join.arrived - beat.answered, "join wait": join.answered - join.arrived}
    commit = first("OFFSET_COMMIT", beat.answered - 0.001)
    if commit is not None and commit.arrived <= join.arrived:
        steps["beat→commit"] = commit.arrived - beat.answered
        steps["commit→join"] = join.arrived - commit.answered
    sync = first("SYNC_GROUP", join.answered - 0.001)
    if sync is None:
        return steps
    leader = join.body.get("leader") == join.body.get("memberId")
    steps["join→sync leader" if leader else "join→sync follower"] = sync.arrived - join.answered
    assigned = [t for t, _ in events["assignments"] if t >= sync.arrived]
    if assigned:
        records = [t for t, *_ in events["batches"] if t >= assigned[0]]
        if records:
            steps["sync→record"] = min(records) - sync.answered
    return steps


def run_steps(log: dict[str, list[Request]], run: dict[str, Any]) -> list[dict[str, float]]:
    """The steps of every member that stayed in the group through the run's change."""
    staying = run["members"][:3]  # a join's 4th member is new; a leave's or kill's 4th is gone
    return [
        member_steps(log.get(rebalance.client_id(run["group"], n), []), events, run["join"])
        for n, events in enumerate(staying)
    ]


def summarise(per_config: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Per configuration: the median of each step (seconds) and how many members had it."""
    out: dict[str, Any] = {}
    for config, members in per_config.items():
        out[config] = {}
        for step in STEPS:
            values = [m[step] for m in members if step in m]
            out[config][step] = {
                "median": statistics.median(values) if values else None,
                "n": len(values),
                "values": values,
            }
    return out


def table(summary: dict[str, Any]) -> Iterator[str]:
    """The steps' medians in milliseconds (the number of members measured in brackets)."""
    yield f"{'client':<22}" + "".join(f"{step:>20}" for step in STEPS)
    for config, steps in summary.items():
        cells = []
        for step in STEPS:
            s = steps[step]
            cells.append("-" if s["median"] is None else f"{s['median'] * 1000:.1f} ({s['n']})")
        yield f"{config:<22}" + "".join(f"{c:>20}" for c in cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=int, default=100, help="records a second per partition")
    parser.add_argument(
        "--configs", default="gengroup-eager,aiokafka-eager,confluent-eager,java-eager"
    )
    parser.add_argument("--case", default="join", help="comma-separated: join,leave,kill")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "rebalance_steps.json")
    args = parser.parse_args()
    configs = args.configs.split(",")
    classic = {c for c in rebalance.CONFIGS if not c.endswith("-consumer")}
    if set(configs) - classic:
        parser.error(f"classic configurations only, of {sorted(classic)}")
    cases = tuple(args.case.split(","))
    if set(cases) - set(rebalance.CASES):
        parser.error(f"cases are {rebalance.CASES}")
    from gengroup.testing.kafka import KafkaBroker

    with (
        tempfile.TemporaryDirectory(prefix="rebalance-steps-") as tmp,
        KafkaBroker(properties=rebalance.BROKER_PROPERTIES, request_log=GROUP_APIS) as kafka,
    ):
        assert kafka.request_log_path is not None
        events = Path(tmp)
        results = rebalance.run_suite(
            kafka.bootstrap,
            configs,
            repeat=args.repeat,
            partitions=args.partitions,
            rate=args.rate,
            events=events,
            cases=cases,
            request_log=kafka.request_log_path,
        )
        log = read_log(kafka.request_log_path)
        steps: dict[str, dict[str, list[dict[str, float]]]] = {}
        for case in cases:
            steps[case] = {}
            for config in configs:
                runs = sorted(events.glob(f"{case}-{config}-*.json"))
                steps[case][config] = [
                    m for path in runs for m in run_steps(log, json.loads(path.read_text()))
                ]
    results["meta"]["command"] = "python benchmarks/bench_rebalance_steps.py " + " ".join(
        f"--{k} {v}" for k, v in vars(args).items() if k in ("repeat", "configs", "case")
    )
    results["steps"] = {case: summarise(by_config) for case, by_config in steps.items()}
    lines = list(rebalance.table(results))
    for case, summary in results["steps"].items():
        lines += ["", f"{case}: steps (ms, median; members measured)", *table(summary)]
    rebalance.report(lines, results["meta"]["load_average"], results, args.json)


if __name__ == "__main__":
    main()
