"""The service's stores of released state beyond the ledger: private multiplicative weights
(:mod:`~dpcurator.service.stores.pmw`), synthetic data and its plans
(:mod:`~dpcurator.service.stores.synth`, :mod:`~dpcurator.service.stores.synth_plan`), streams
(:mod:`~dpcurator.service.stores.streams`), the sparse vector
(:mod:`~dpcurator.service.stores.sparse`) and surveys (:mod:`~dpcurator.service.stores.surveys`)."""
