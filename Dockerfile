# syntax=docker/dockerfile:1
# The base image of both stages, pinned by digest (the tag alone may move under a rebuild).
# To move it: docker buildx imagetools inspect python:3.11-slim (its "Digest:" line).
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

# Build stage: svc and its dependencies in a throwaway virtualenv, plus granian's JSON log
# configuration (the same format svc's own logs use).
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The dependencies exactly as requirements/runtime.lock pins them (hash-checked; `make lock`
# refreshes it), in a layer of their own that a change to svc's code leaves cached.
COPY requirements/runtime.lock ./requirements/
RUN python -m venv /opt/svc \
 && /opt/svc/bin/pip install --require-hashes -r requirements/runtime.lock
# Then svc itself (the package app only: bench and the tests run from the repository),
# without dependencies: pip check fails the build if the lock lacks one.
COPY pyproject.toml README.md ./
COPY app ./app
RUN /opt/svc/bin/pip install --no-deps . && /opt/svc/bin/pip check \
 && /opt/svc/bin/python -c "import json; from app.core.logs import granian_log_config; \
print(json.dumps(granian_log_config()))" > /opt/svc/granian-log.json

# Runtime stage: the virtualenv only, run as an unprivileged user (by number, so that an
# orchestrator's runAsNonRoot can check it). Nothing is written outside /var/lib/svc
# (SVC_DATA_DIR) and /tmp (the metrics of the workers): the root filesystem can be
# read-only (docker run --read-only --tmpfs /tmp --tmpfs /var/lib/svc).
FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --home-dir /var/lib/svc --create-home svc
COPY --from=build /opt/svc /opt/svc
# granian reads its options from GRANIAN_* variables, svc from SVC_* (README, Configuration).
# Required at run time: SVC_REDIS_URL, SVC_DATABASE_URL, SVC_KEY_PEPPER, SVC_ADMIN_TOKEN.
# GRANIAN_WORKERS_KILL_TIMEOUT must exceed SVC_SHUTDOWN_GRACE_S (30) by the time settling
# and the final flush take: the kill is only a backstop.
ENV PATH=/opt/svc/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SVC_DATA_DIR=/var/lib/svc \
    SVC_METRICS_DIR=/tmp/svc-metrics \
    GRANIAN_INTERFACE=rsgi \
    GRANIAN_WEBSOCKETS=false \
    GRANIAN_HOST=0.0.0.0 \
    GRANIAN_PORT=8000 \
    GRANIAN_WORKERS=2 \
    GRANIAN_BACKPRESSURE=2048 \
    GRANIAN_BACKLOG=2048 \
    GRANIAN_LOOP=uvloop \
    GRANIAN_RESPAWN_FAILED_WORKERS=true \
    GRANIAN_WORKERS_KILL_TIMEOUT=45 \
    GRANIAN_LOG_CONFIG=/opt/svc/granian-log.json
USER 10001:10001
WORKDIR /var/lib/svc
EXPOSE 8000
# Liveness: the process answers (readiness, with Redis and the store, is GET /readyz).
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
# granian runs svc's RSGI app directly; `svc admin …` works in the same image
# (docker compose exec svc svc admin reconcile).
ENTRYPOINT ["granian", "app.rsgi:app"]
