"""Fixtures shared by the system tests: ``make run`` itself, and the client wheel in a Django-free venv."""

from tests.system.client_venv import client_venv
from tests.system.devstack import devstack

__all__ = ["client_venv", "devstack"]
