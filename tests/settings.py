"""The settings the test suite and the processes it starts run with: the product's settings, with a fast
password hasher (Django's documented advice for tests), since the default's work factor is what makes it
safe and would dominate the suite's CPU time."""

from opencompany.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
