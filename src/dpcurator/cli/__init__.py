"""The ``dpcurator`` command line: :func:`main` parses the arguments and runs the command.

:mod:`~dpcurator.cli.main` builds the parser and dispatches; :mod:`~dpcurator.cli.args` and
:mod:`~dpcurator.cli.format` hold the argument types and the output formats; the commands live
in :mod:`~dpcurator.cli.client_commands`, :mod:`~dpcurator.cli.fit`, :mod:`~dpcurator.cli.synth`
and :mod:`~dpcurator.cli.metadata_check`. Each command's imports are deferred, so
``dpcurator --help`` answers at once.
"""

from dpcurator.cli.main import main

__all__ = ["main"]
