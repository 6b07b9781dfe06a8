#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Reference ARI, MI, EMI and AMI values for tests/core/test_metrics.cpp, from scikit-learn.

Run:  /usr/bin/python3 tests/data/metrics_reference.py
(Debian 12: apt-get install python3-sklearn, scikit-learn 1.2.1, numpy 1.24.2, scipy 1.10.1.)
Prints one C++ initializer line per case; the test holds them as literals and rebuilds the same
label vectors itself, so it needs no Python at run time. The generators below must stay in step
with makeCase() in the test.

Run:  /usr/bin/python3 tests/data/metrics_reference.py --mpmath     (about a minute)
prints the EMI of the two large generated cases from the full hypergeometric sum evaluated with
mpmath at 40 significant digits. scikit-learn's own EMI sums exp() of differences of double
lgamma values near N log N, so it carries relative errors of about 1e-10 at N = 5e4 and 1e-9 at
N = 3e5; these values check kmseg's EMI beyond that.
"""
import sys
from collections import Counter

import numpy as np
from sklearn.metrics import adjusted_mutual_info_score, adjusted_rand_score, mutual_info_score
from sklearn.metrics.cluster import contingency_matrix
from sklearn.metrics.cluster._expected_mutual_info_fast import expected_mutual_information

EXPLICIT = {
    "halfSplit": ([0, 0, 1, 1], [0, 0, 1, 2]),
    "crossed": ([0, 0, 1, 1], [0, 1, 0, 1]),
    "oneVsAllDifferent": ([0, 0, 0, 0], [0, 1, 2, 3]),
    "identical": ([0, 1, 2, 0, 1, 2, 2, 1], [0, 1, 2, 0, 1, 2, 2, 1]),
    "permuted": ([0, 0, 1, 1, 2, 2, 3], [2, 2, 0, 0, 3, 3, 1]),
    "bothOneCluster": ([0, 0, 0], [1, 1, 1]),
    "oneVsThree": ([0, 0, 0, 0, 0, 0], [0, 0, 1, 1, 2, 2]),
    "unusedLabels": ([0, 2, 2, 4, 4, 4], [1, 1, 3, 3, 3, 0]),
    "small": ([0, 0, 0, 1, 1, 1, 2, 2, 2, 2], [0, 0, 1, 1, 1, 2, 2, 2, 0, 1]),
}


def hash32(i):
    return (i * 2654435761) % 2**32


def modular(n):
    return [(i * 7 + 3) % 5 for i in range(n)], [(i * 11 + i // 7) % 4 for i in range(n)]


def quadratic(n):
    return [(i * i + 3 * i) % 7 for i in range(n)], [(i // 13 + i % 3) % 6 for i in range(n)]


def noisyCopy(n):
    a = [(i // 97 + i * i % 11) % 6 for i in range(n)]
    b = []
    for i in range(n):
        h = hash32(i)
        b.append((a[i] + 1 + h % 3) % 6 if h < 429496730 else a[i])
    return a, b


def skewed(n):
    a, b = [], []
    for i in range(n):
        h = hash32(i) >> 16
        ai = (h * h * 8) >> 32
        a.append(ai)
        b.append((ai * 3 + (i % 7 if i % 5 == 0 else 0)) % 7)
    return a, b


GENERATED = {
    "modular1000": modular(1000),
    "quadratic97": quadratic(97),
    "noisyCopy50000": noisyCopy(50000),
    "skewed300007": skewed(300007),
}


def mpmathEmi(a, b):
    import mpmath

    mpmath.mp.dps = 40
    n = len(a)
    lf = lambda x: mpmath.loggamma(x + 1)
    total = mpmath.mpf(0)
    for ai in Counter(a).values():
        for bj in Counter(b).values():
            fixed = lf(ai) + lf(bj) + lf(n - ai) + lf(n - bj) - lf(n)
            mu = mpmath.mpf(ai) * bj / n
            # Terms beyond 40 standard deviations (sd <= sqrt(mu)) are far below 1e-40.
            sd = mpmath.sqrt(mu) + 5
            lo = max(1, ai + bj - n, int(mu - 40 * sd))
            hi = min(ai, bj, int(mu + 40 * sd))
            for k in range(lo, hi + 1):
                logp = fixed - lf(k) - lf(ai - k) - lf(bj - k) - lf(n - ai - bj + k)
                term = mpmath.log(mpmath.mpf(n) * k / (mpmath.mpf(ai) * bj)) * mpmath.exp(logp)
                total += mpmath.mpf(k) / n * term
    return total


def main():
    if "--mpmath" in sys.argv:
        import mpmath

        for name in ["noisyCopy50000", "skewed300007"]:
            print('    {"%s", %s},' % (name, mpmath.nstr(mpmathEmi(*GENERATED[name]), 20)))
        return
    for name, (a, b) in list(EXPLICIT.items()) + list(GENERATED.items()):
        c = contingency_matrix(a, b, sparse=True).astype(np.float64)
        ari = adjusted_rand_score(a, b)
        mi = mutual_info_score(a, b)
        emi = expected_mutual_information(c, len(a))
        ami = adjusted_mutual_info_score(a, b)
        print('    {"%s", %.17g, %.17g, %.17g, %.17g},' % (name, ari, mi, emi, ami))


if __name__ == "__main__":
    main()
