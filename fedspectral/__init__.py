"""The ``fedspectral`` command and the tools a user runs against their own data and SuperNodes.

``fedspectral <command> --help`` for each command (:mod:`fedspectral.cli`). The ServerApp and ClientApp
(``server_app``, ``client_app``, ``fl_strategies``) never import this package.
"""
