"""The front end: a request in SQL text (:mod:`~dpcurator.query.frontend.sql`,
:mod:`~dpcurator.query.frontend.text`, :mod:`~dpcurator.query.frontend.expressions`,
:mod:`~dpcurator.query.frontend.join`, the fit SQL of :mod:`~dpcurator.query.frontend.fit`) or
from the builder (:mod:`~dpcurator.query.frontend.builder`) becomes the query IR."""
