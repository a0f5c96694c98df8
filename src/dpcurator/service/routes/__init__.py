"""The HTTP routes, one module per resource: :mod:`~dpcurator.service.routes.core` (health, the
caller, datasets, queries, releases, analysts, and the dependencies every route shares),
:mod:`~dpcurator.service.routes.fit`, :mod:`~dpcurator.service.routes.pmw`,
:mod:`~dpcurator.service.routes.streams` and :mod:`~dpcurator.service.routes.synth`.
:mod:`dpcurator.service.app` mounts their routers."""
