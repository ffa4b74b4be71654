"""The routes of the HTTP worker, one module per concern."""
