"""Mechanisms: the only place in dpcurator that adds noise.

Each mechanism is a frozen object, validated at construction, with a privacy map (sensitivity ->
privacy loss), a release method drawing exact noise from :mod:`dpcurator.random`, and an accuracy
statement (the half-width of a (1-α) interval for its noise).
"""

from __future__ import annotations

from dpcurator.mechanisms.exponential import (
    PermuteAndFlip,
    exponential_mechanism,
    permute_and_flip,
)
from dpcurator.mechanisms.gaussian import Gaussian
from dpcurator.mechanisms.laplace import Laplace
from dpcurator.mechanisms.randomized_response import KaryRandomizedResponse, RandomizedResponse
from dpcurator.mechanisms.sparse_vector import AboveThreshold
from dpcurator.mechanisms.threshold import PartitionSelection, partition_selection_threshold

__all__ = [
    "AboveThreshold",
    "Gaussian",
    "KaryRandomizedResponse",
    "Laplace",
    "PartitionSelection",
    "PermuteAndFlip",
    "RandomizedResponse",
    "exponential_mechanism",
    "partition_selection_threshold",
    "permute_and_flip",
]
