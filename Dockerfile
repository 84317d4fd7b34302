# syntax=docker/dockerfile:1
# Build stage: a wheel of svc and its dependencies, in a throwaway virtualenv.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY lua ./lua
COPY bench ./bench
RUN python -m venv /opt/svc && /opt/svc/bin/pip install .

# Runtime stage: the virtualenv only, run as an unprivileged user.
FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/svc --create-home svc
COPY --from=build /opt/svc /opt/svc
ENV PATH=/opt/svc/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    SVC_DATA_DIR=/var/lib/svc \
    SVC_HOST=0.0.0.0 \
    SVC_PORT=8000
USER svc
WORKDIR /var/lib/svc
EXPOSE 8000
# Liveness: the process answers (readiness, with Redis and the store, is GET /readyz).
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
# Production configuration comes from the environment: SVC_REDIS_URL, SVC_DATABASE_URL,
# SVC_KEY_PEPPER, SVC_ADMIN_TOKEN (see README). Workers default to the container's CPUs.
ENTRYPOINT ["svc", "serve"]
