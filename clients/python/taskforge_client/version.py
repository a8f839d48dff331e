"""The client package's version (read by its build, sent in every request's User-Agent)."""

__version__ = "0.3.0"
