# syntax=docker/dockerfile:1
# The base image of every stage, pinned by digest (the tag alone may move under a rebuild).
# To move it: docker buildx imagetools inspect python:3.11-slim (its "Digest:" line).
# The tests build on a Debian 12 base of their own instead (tests/container, made with
# debootstrap where no image registry is reachable): --build-arg PYTHON_IMAGE=… . Its
# python3 is Debian's 3.11 in /usr/bin, this one's is in /usr/local/bin: every step below
# finds python3 on PATH, and the virtualenv's own python after that.
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

# Build stage: svc and its dependencies in a throwaway virtualenv.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The dependencies exactly as requirements/runtime.lock pins them (hash-checked; `make lock`
# refreshes it), in a layer of their own that a change to svc's code leaves cached.
COPY requirements/runtime.lock ./requirements/
RUN python3 -m venv /opt/svc \
 && /opt/svc/bin/pip install --require-hashes -r requirements/runtime.lock
# Then svc itself (the package app only: bench and the tests run from the repository),
# without dependencies: pip check fails the build if the lock lacks one. pip and setuptools
# go last: nothing is installed at run time, and the image then holds exactly the packages
# its SBOM lists.
COPY pyproject.toml README.md ./
COPY app ./app
RUN /opt/svc/bin/pip install --no-deps . && /opt/svc/bin/pip check \
 && /opt/svc/bin/pip uninstall --yes pip setuptools

# SBOM stage: the image's Python packages as a CycloneDX document (JSON), written by
# cyclonedx-bom (requirements/sbom.lock) from requirements/runtime.lock, svc itself as the
# component they make up. A stage of its own: neither the tool nor its dependencies reach
# the image, only /opt/svc/sbom.cdx.json.
FROM ${PYTHON_IMAGE} AS sbom
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/sbom.lock requirements/runtime.lock ./requirements/
COPY pyproject.toml ./
RUN python3 -m venv /opt/sbom \
 && /opt/sbom/bin/pip install --require-hashes -r requirements/sbom.lock \
 && /opt/sbom/bin/cyclonedx-py requirements --pyproject pyproject.toml --output-reproducible \
    --output-format JSON --output-file /src/sbom.cdx.json requirements/runtime.lock

# Runtime stage: the virtualenv only, run as an unprivileged user (by number, so that an
# orchestrator's runAsNonRoot can check it). Nothing is written outside /var/lib/svc
# (SVC_DATA_DIR) and /tmp (the metrics of the workers): the root filesystem can be
# read-only (docker run --read-only --tmpfs /tmp --volume svc-data:/var/lib/svc).
FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --home-dir /var/lib/svc --create-home svc
COPY --from=build /opt/svc /opt/svc
COPY --from=sbom /src/sbom.cdx.json /opt/svc/sbom.cdx.json
# svc reads SVC_* (README, Configuration) and starts granian with them itself (`svc
# serve`): 2 workers on port 8000 of every interface, a kill timeout 15 s past
# SVC_SHUTDOWN_GRACE_S, JSON logs. Required at run time: SVC_REDIS_URL, SVC_DATABASE_URL,
# SVC_KEY_PEPPER, SVC_ADMIN_TOKEN.
ENV PATH=/opt/svc/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SVC_HOST=0.0.0.0 \
    SVC_PORT=8000 \
    SVC_WORKERS=2 \
    SVC_DATA_DIR=/var/lib/svc \
    SVC_METRICS_DIR=/tmp/svc-metrics
USER 10001:10001
WORKDIR /var/lib/svc
EXPOSE 8000
# Liveness: the process answers (readiness, with Redis and the store, is GET /readyz), on
# the port it serves (SVC_PORT, when a container sets another).
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ['SVC_PORT'], timeout=2)"]
# `svc serve` checks the settings, the port, the models file, the data folder, Redis and
# the store before granian listens: a failure is one or two lines on stderr and exit
# status 2, as outside a container. `svc admin …` works in the same image
# (docker compose exec svc-1 svc admin reconcile).
ENTRYPOINT ["svc", "serve"]
