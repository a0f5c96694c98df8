"""The demo table in a zCDP session, shared by the contingency-table tests."""

from __future__ import annotations

import pandas as pd

import dpcurator as dpc
from dpcurator.accounting import PrivacyFilter, ZCDPAccountant
from dpcurator.core.measures import ZCDP

#: The columns of the demo table the table tests use (two keyed, a bool, a binned int).
COLUMNS = ["sex", "region", "employed", "age"]


def zcdp_session(frame: pd.DataFrame, rho: float) -> dpc.Session:
    """``frame`` (the demo table or a neighbour) under the demo metadata, ρ-zCDP budget."""
    meta = dpc.Metadata.from_yaml(dpc.demo_path("people.yaml"))
    budget = PrivacyFilter(ZCDP(rho), ZCDPAccountant())
    return dpc.Session.from_data(frame, metadata=meta, budget_filter=budget)


def demo_people() -> pd.DataFrame:
    """The demo table."""
    return pd.read_csv(dpc.demo_path("people.csv"))
