"""Model fits on a session's table: :mod:`~dpcurator.query.fit.core` plans and runs them; the
columns, linear regression on the engine's Gram matrix, the row estimators,
propose-test-release and the released estimate live in :mod:`~dpcurator.query.fit.columns`,
:mod:`~dpcurator.query.fit.linear`, :mod:`~dpcurator.query.fit.rows`,
:mod:`~dpcurator.query.fit.ptr` and :mod:`~dpcurator.query.fit.release`."""
