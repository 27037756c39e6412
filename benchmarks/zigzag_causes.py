"""Every ResNet-18 and MobileNet-V2 layer outside 0.95-1.05x of ZigZag's energy, grouped by cause (issue 26).

From the cached ZigZag 3.9.1 runs (benchmarks/data/zigzag_*.json, made by `bench_zigzag`; ZigZag is not needed) and
our `block` on the matching preset with ZigZag's C|K unrolling. Per layer it finds the (level, operand) where the
two energies part most (ZigZag's minus ours) and ZigZag's port-granule excess there: ZigZag bills whole port
accesses, so a transfer of a few words costs a full access; the excess is that level's energy times the share of
its accesses above the fewest accesses a word takes at that level anywhere in the network (its full-width rate).
A layer's cause is then
  * "port granules": ZigZag's granule excess covers at least 80 % of the difference (we do not round to ports);
  * "LOMA's space": ours is below ZigZag with the difference in the PE RFs (our exact search keeps a nest LOMA's
    loop-prime-factor limit leaves out);
  * "one cut for three RFs": ours is above, in the RFs' weights (the preset's RFs share one cut of the nest);
  * anything else is printed as "unexplained" with its per-level figures.

Run: .venv/bin/python -m benchmarks.zigzag_causes
"""

from __future__ import annotations

from collections import defaultdict

from benchmarks.bench_zigzag import (
    CASES,
    LEVELS,
    NETWORKS,
    _short,
    best_of_mappers,
    cache_path,
    layer_of,
    like_for_like,
)
from engine.blocking import block

LOW, HIGH, COVERED = 0.95, 1.05, 0.8


def _rates(rows: list[dict]) -> dict[tuple[str, str, str], float]:
    """Fewest accesses per word seen anywhere in the network, per (memory, operand, direction): the port's full rate."""
    best: dict[tuple[str, str, str], float] = {}
    for row in rows:
        for T, levels in row["operands"].items():
            for level in levels:
                for d, n in level["elements"].items():
                    if n:
                        key = level["memory"], T, d
                        best[key] = min(best.get(key, float("inf")), level["accesses"][d] / n)
    return best


def _granule_excess(row: dict, rates: dict, hardware: str) -> dict[tuple[str, str], float]:
    """ZigZag's energy (pJ) per (our level, operand) spent on accesses beyond the port's full rate."""
    excess: dict[tuple[str, str], float] = defaultdict(float)
    for T, levels in row["operands"].items():
        for level in levels:
            actual = sum(level["accesses"].values())
            ideal = sum(n * rates[level["memory"], T, d] for d, n in level["elements"].items() if n)
            if actual:
                excess[LEVELS[hardware][level["memory"]], T] += level["energy_pj"] * (1 - ideal / actual)
    return excess


def classify(hardware: str, network: str) -> list[tuple[str, str, float, str]]:
    """(layer, cause, our energy / ZigZag's, evidence) for every layer outside LOW-HIGH."""
    rows = best_of_mappers(hardware, network)
    rates, hierarchy, out = _rates(rows), like_for_like(hardware), []
    for row in rows:
        cost = block(layer_of(row), hierarchy).cost
        ratio = cost.total_pj / row["energy_pj"]
        if LOW <= ratio <= HIGH:
            continue
        theirs: dict[tuple[str, str], float] = defaultdict(float)
        for T, levels in row["operands"].items():
            for level in levels:
                theirs[LEVELS[hardware][level["memory"]], T] += level["energy_pj"]
        diffs = {key: e - cost.energy_at(*key) for key, e in theirs.items()}
        total = row["energy_pj"] - cost.total_pj
        granules = sum(_granule_excess(row, rates, hardware).values())
        top = max(diffs, key=lambda k: abs(diffs[k]))
        evidence = (f"ZigZag - ours {total / 1e3:+,.0f} nJ; most at {top[0]} {top[1]} {diffs[top] / 1e3:+,.0f} nJ; "
                    f"ZigZag's granule excess {granules / 1e3:,.0f} nJ")
        if total > 0 and granules >= COVERED * total:
            cause = "port granules"
        elif total > 0 and top[0] == "PE RFs":
            cause = "LOMA's space"
        elif total < 0 and top == ("PE RFs", "W"):
            cause = "one cut for three RFs"
        else:
            cause = "unexplained"
        out.append((_short(row["name"]), cause, ratio, evidence))
    return out


def main() -> None:
    for network in NETWORKS:
        for hardware, _, _ in CASES:
            if not cache_path(hardware, "loma", network).exists():
                print(f"### {network} on {hardware}: no cached ZigZag run\n")
                continue
            found = classify(hardware, network)
            groups: dict[str, list] = defaultdict(list)
            for item in found:
                groups[item[1]].append(item)
            print(f"### {network} on {hardware}: {len(found)} layers outside {LOW}-{HIGH}x")
            for cause, items in groups.items():
                lo, hi = min(i[2] for i in items), max(i[2] for i in items)
                print(f"  {cause}: {len(items)} layers, {lo:.3f}-{hi:.3f}x")
                for name, _, ratio, evidence in items:
                    print(f"    {name} {ratio:.3f}: {evidence}")
            print()


if __name__ == "__main__":
    main()
