"""Cohen's kappa between two raters, with its large-sample standard error and 95 % interval.

    k = cohen_kappa([("A", "A"), ("A", "B"), ("B", "B"), ("B", "B")])
    k.kappa, k.se, k.ci95, k.observed, k.expected, k.n

Kappa is the agreement beyond chance: (po - pe) / (1 - pe), po the share of cases where the two
labels are equal, pe the share expected if each rater labelled independently at its own rates
(the product of the two raters' marginal shares, summed over the labels). 1 is perfect, 0 is
chance, below 0 worse than chance. The labels can be any strings; a label only one rater uses
(a judge's "tie") counts against agreement and adds nothing to pe.

The interval is analytic: kappa +- 1.96 SE, clipped to [-1, 1], with the SE of Fleiss, Cohen
and Everitt (1969; Fleiss, Levin & Paik, *Statistical Methods for Rates and Proportions*,
3rd ed., eq. 18.15), the standard error under the observed table (not under kappa = 0):

    var = [sum_i p_ii (1 - (p_i. + p_.i)(1 - k))^2
           + (1 - k)^2 sum_{i != j} p_ij (p_.i + p_j.)^2 - (k - pe (1 - k))^2] / (n (1 - pe)^2)

It is a large-sample formula: with a few dozen cases the interval is wide, which is the point.
At perfect agreement (kappa = 1) the SE is 0 and the interval a point: the uncertainty is then
best read from the accuracy's Wilson interval.
When both raters gave one and the same label to every case (pe = 1) kappa is undefined (None).

>>> k = cohen_kappa([("y", "y")] * 20 + [("y", "n")] * 5 + [("n", "y")] * 10 + [("n", "n")] * 15)
>>> round(k.kappa, 4), round(k.se, 4), [round(x, 3) for x in k.ci95]
(0.4, 0.127, [0.151, 0.649])
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from dragonfarm_core.judging.summary import Z95

INTERVAL = "analytic (Fleiss, Cohen & Everitt 1969 standard error), 95 %"


@dataclass(frozen=True)
class Kappa:
    """Cohen's kappa of n labelled cases; kappa, se and ci95 are None where undefined."""

    kappa: float | None
    se: float | None
    ci95: tuple[float, float] | None
    observed: float | None
    """po: the share of cases the two raters labelled alike."""
    expected: float | None
    """pe: the share they would label alike by chance, at their own rates."""
    n: int


def cohen_kappa(pairs: Iterable[tuple[str, str]]) -> Kappa:
    """Kappa of (first rater's label, second rater's label) pairs (see the module docstring)."""
    cases = list(pairs)
    n = len(cases)
    if n == 0:
        return Kappa(None, None, None, None, None, 0)
    cells = Counter(cases)
    rows = Counter(a for a, _ in cases)
    cols = Counter(b for _, b in cases)
    p_row = {k: v / n for k, v in rows.items()}
    p_col = {k: v / n for k, v in cols.items()}
    labels = set(p_row) | set(p_col)
    po = sum(cells[(k, k)] for k in labels) / n
    pe = sum(p_row.get(k, 0.0) * p_col.get(k, 0.0) for k in labels)
    if pe >= 1.0 - 1e-12:
        return Kappa(None, None, None, po, pe, n)
    kappa = (po - pe) / (1 - pe)
    diagonal = sum(
        cells[(k, k)] / n * (1 - (p_row.get(k, 0.0) + p_col.get(k, 0.0)) * (1 - kappa)) ** 2
        for k in labels
    )
    off = sum(
        count / n * (p_col.get(a, 0.0) + p_row.get(b, 0.0)) ** 2
        for (a, b), count in cells.items()
        if a != b
    )
    variance = (diagonal + (1 - kappa) ** 2 * off - (kappa - pe * (1 - kappa)) ** 2) / (
        n * (1 - pe) ** 2
    )
    se = math.sqrt(max(variance, 0.0))
    ci = (max(-1.0, kappa - Z95 * se), min(1.0, kappa + Z95 * se))
    return Kappa(kappa, se, ci, po, pe, n)
