"""Django's PostgreSQL backend with the connection pool a server process needs (`base.DatabaseWrapper`).

Settings name it as the engine (`ENGINE = "opencompany.core.postgresql"`) when `DATABASE_URL` is a
PostgreSQL URL; everything but the pool and the session set-up is Django's own backend.
"""
