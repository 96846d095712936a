# meshplan's gRPC service (meshplan.v1.Planner) as a container image.
#
#   docker build -t meshplan .
#   docker run --rm -p 50051:50051 meshplan                 # plaintext, no tokens: a laptop
#   docker run --rm -p 50051:50051 -p 9090:9090 \
#     -v "$PWD/certs:/etc/meshplan/tls:ro" -v "$PWD/tokens:/etc/meshplan/tokens:ro" \
#     -e MESHPLAN_TLS_CERT=/etc/meshplan/tls/tls.crt -e MESHPLAN_TLS_KEY=/etc/meshplan/tls/tls.key \
#     -e MESHPLAN_AUTH_TOKEN_FILE=/etc/meshplan/tokens/tokens meshplan
#
# Every `meshplan serve` setting is a MESHPLAN_* variable (docs/settings.md, "Every setting").
# With Ray, for KubeRay's pods (deploy/kuberay; README, "Scale out"):
#   docker build --build-arg EXTRAS=ray -t meshplan-ray .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: install the package and its dependencies into a virtual environment -------------
FROM ${PYTHON_IMAGE} AS build
# the optional dependencies installed (pyproject.toml): `planner` names the plain install
# (the planner), `ray` adds Ray
ARG EXTRAS=planner
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/meshplan
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY meshplan ./meshplan
COPY solver ./solver
COPY server ./server
COPY client ./client
COPY tools ./tools
RUN /opt/meshplan/bin/pip install --upgrade pip \
 && /opt/meshplan/bin/pip install ".[${EXTRAS}]" \
 && /opt/meshplan/bin/meshplan catalog > /dev/null

# --- runtime: the environment alone, run as an unprivileged user ----------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="meshplan" \
      org.opencontainers.image.description="Plans how a transformer training step is cut across GPUs (gRPC service meshplan.v1.Planner)"
RUN groupadd --system --gid 10001 meshplan \
 && useradd --system --uid 10001 --gid meshplan --home-dir /tmp --shell /usr/sbin/nologin meshplan
COPY --from=build /opt/meshplan /opt/meshplan
# MALLOC_ARENA_MAX: glibc keeps one heap per thread; two keep the RSS of a threaded server flat.
ENV PATH=/opt/meshplan/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MALLOC_ARENA_MAX=2 \
    MESHPLAN_HOST=0.0.0.0 \
    MESHPLAN_PORT=50051 \
    MESHPLAN_HEALTH_PORT=50052 \
    MESHPLAN_HTTP_PORT=8080 \
    MESHPLAN_METRICS_PORT=9090
USER 10001:10001
WORKDIR /tmp
# 50051: gRPC (TLS and tokens when configured); 50052: health only, plaintext (probes);
# 8080: the same calls as JSON over HTTP and the planner page (the same TLS and tokens);
# 9090: Prometheus metrics.
EXPOSE 50051 50052 8080 9090
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-m", "meshplan.server.probe"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["meshplan", "serve"]
