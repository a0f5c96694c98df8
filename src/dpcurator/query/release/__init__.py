"""The release of a charged plan: noise and post-processing (:mod:`~dpcurator.query.release.core`),
what a plan releases and costs (:mod:`~dpcurator.query.release.estimate`), how a release is shown
(:mod:`~dpcurator.query.release.view`), ratio intervals, the clipping report and the post-charge
step (:mod:`~dpcurator.query.release.after_charge`)."""
