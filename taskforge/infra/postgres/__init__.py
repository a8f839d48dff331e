"""Django's PostgreSQL backend, with a pool health check that notices a mass death (see ``base``)."""
