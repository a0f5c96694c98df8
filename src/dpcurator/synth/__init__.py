"""Non-interactive releases: consistent contingency tables and DP synthetic data.

* :mod:`~dpcurator.synth.marginals`: noisy marginals made consistent, non-negative, integral;
* :mod:`~dpcurator.synth.mwem`, :mod:`~dpcurator.synth.mst`, :mod:`~dpcurator.synth.aim`:
  synthetic data (MWEM ours; MST and AIM on mbi's inference, with our noise and accounting);
* :mod:`~dpcurator.synth.report`: the owner's utility report.

Every column needs a public domain from the metadata (:mod:`~dpcurator.synth.domain`); marginals
are computed by the session's engine and charged through its budget filter
(:mod:`~dpcurator.synth.measure`). Needs the ``synth`` extra (``mbi``, which brings JAX).
"""
