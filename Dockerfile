# vramscope: the server and dashboard in one slim image.
#
#   docker build -t vramscope .
#   docker run -p 8080:8080 -v vramscope-data:/data vramscope
#
# Team mode (PostgreSQL + S3, several instances): docs/team-setup.md.
#
# The build runs exactly what the test suite runs: scripts/build-frontend
# (the wasm dashboard into frontend/dist/, with the pinned wasm-bindgen and
# wasm-opt it installs into target/tools/) and
# `cargo build --release --locked -p vramscope`, which embeds frontend/dist/.
# No Docker engine runs on the machines where this file was written, so the
# image itself has not been built there; every command in it is one that
# `scripts/test` (which `.ci/run` calls) runs.

# --- build: the dashboard (wasm32) and the binary -------------------------
FROM rust:1.95-bookworm AS build
# npm installs binaryen (wasm-opt) the first time scripts/build-frontend
# runs, as on a fresh CI machine (scripts/setup).
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends npm \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN ./scripts/build-frontend
RUN cargo build --release --locked -p vramscope \
    && cp target/release/vramscope /usr/local/bin/vramscope

# --- runtime: the binary alone -------------------------------------------
FROM debian:bookworm-slim
# ca-certificates: TLS to S3 and PostgreSQL (rustls reads the system roots);
# curl: the health check.
RUN apt-get update -qq \
    && apt-get install -y -qq --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin vramscope \
    && mkdir -p /data \
    && chown vramscope:vramscope /data
COPY --from=build /usr/local/bin/vramscope /usr/local/bin/vramscope

USER vramscope
WORKDIR /data
# The embedded SQLite database and snapshot files (when not in team mode),
# and staging space for uploads.
VOLUME /data
# Inside a container the server listens beyond loopback, so API tokens are
# mandatory and it refuses to start until one exists. Create the first one
# with the same image and volume (or the same database_url):
#   docker run --rm -v vramscope-data:/data --entrypoint vramscope vramscope \
#       token create --role admin --name ops
ENV VRAMSCOPE_BIND=0.0.0.0:8080 \
    VRAMSCOPE_DATA_DIR=/data \
    VRAMSCOPE_LOG_FORMAT=json
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["vramscope", "serve"]
