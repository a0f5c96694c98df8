"""Planning from the public metadata alone: type checking, validation and limits, the analysis of
the IR, the choice of noise, the budget split, accuracy-first costs, the quantile, clipping and
bounds plans, histogram bins, and the plan's facts and outputs
(:mod:`~dpcurator.query.plan.planner` assembles them)."""
