"""Statistics: pure functions, no I/O."""

from oloproof.stats.intervals import (
    RateInterval,
    clopper_pearson,
    rate_interval,
    round_outward,
)
from oloproof.stats.quantiles import (
    QuantileInterval,
    order_statistic_ranks,
    quantile_interval,
)

__all__ = [
    "QuantileInterval",
    "RateInterval",
    "clopper_pearson",
    "order_statistic_ranks",
    "quantile_interval",
    "rate_interval",
    "round_outward",
]
