"""The curator service: HTTP API, ledger, authentication and console (README: "The curator
service")."""
