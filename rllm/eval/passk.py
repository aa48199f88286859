"""pass@k and mean@k over repeated samples of each item.

For an item answered ``n`` times with ``c`` correct answers, the unbiased estimator of pass@k (the
chance that at least one of ``k`` samples drawn without replacement from the ``n`` is correct; Chen et
al. 2021, "Evaluating Large Language Models Trained on Code") is

    pass@k = 1 - C(n - c, k) / C(n, k)  =  1 - prod_{i = n-c+1}^{n} (1 - k / i)

computed in the product form, which stays exact for large ``n``. mean@k is the mean correctness of the
samples (every sample counts; with ``k = n`` it equals pass@1). Both are averaged over items.
"""

from __future__ import annotations

from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one item with ``c`` correct out of ``n`` samples (needs ``k <= n``)."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least {k} samples per item, got n={n}")
    if n - c < k:
        return 1.0
    value = 1.0
    for i in range(n - c + 1, n + 1):
        value *= 1.0 - k / i
    return 1.0 - value


def mean_pass_at_k(outcomes: Sequence[Sequence[bool]], k: int) -> float:
    """pass@k averaged over items; ``outcomes[item]`` lists the correctness of that item's samples."""
    if not outcomes:
        raise ValueError("no items to score")
    return sum(pass_at_k(len(o), sum(map(bool, o)), k) for o in outcomes) / len(outcomes)


def ks_to_report(n: int) -> list[int]:
    """The k of a summary: 1, 2, 4, ... up to ``n``, and ``n`` itself."""
    ks = [1]
    while ks[-1] * 2 < n:
        ks.append(ks[-1] * 2)
    if n > 1:
        ks.append(n)
    return ks
