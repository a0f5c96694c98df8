"""Hypothesis tests on a session's table (SQL ``TTEST``, ``ANOVA``, ``PROPTEST``, ``CHI2``,
``KS``): :mod:`~dpcurator.query.hypothesis.plan` plans them from public inputs and
:mod:`~dpcurator.query.hypothesis.release` releases them as tables."""
