# mirrorgate's container image: the `mirrorgate` console script on Python 3.11, as a non-root user.
#
#   docker build -t mirrorgate:0.1.0 .        # the name and tag the Helm chart expects by default
#   docker run --rm -p 127.0.0.1:8080:8080 -v "$PWD/mirrorgate.yaml:/etc/mirrorgate/mirrorgate.yaml:ro" \
#     -e OPENAI_API_KEY -e MIRRORGATE_ADMIN_TOKEN mirrorgate:0.1.0
#
# The default command listens on 0.0.0.0 inside the container (`serve --host 0.0.0.0`, whatever
# server.host the file says): the container's loopback is unreachable through a published port.
# Listening beyond loopback needs the admin token (MIRRORGATE_ADMIN_TOKEN, the variable of
# server.admin_token_env): without it the gateway refuses to start.
#
# BASE is any Debian-based image with Python 3.11 as `python`: the official slim image by default;
# CI builds on a local Debian base (scripts/image_base.sh, docs/container.md), with
# `--build-arg BASE=localhost/mirrorgate-base:bookworm`.
#
# The root filesystem may be read-only: the gateway writes only to /data (the default SQLite
# location in the chart) and /tmp. Bytecode is compiled at build time.

ARG BASE=python:3.11-slim-bookworm

# --- build: install the distribution and its dependencies into a virtualenv ----------------------
FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/mirrorgate
COPY pyproject.toml README.md ./
COPY proxy/ proxy/
COPY analyzers/ analyzers/
COPY alerts/ alerts/
RUN /opt/mirrorgate/bin/pip install . \
 && /opt/mirrorgate/bin/mirrorgate --help >/dev/null

# --- runtime: the virtualenv only, no compilers, no sources ------------------------------------
FROM ${BASE} AS runtime
LABEL org.opencontainers.image.title="mirrorgate" \
      org.opencontainers.image.description="LLM gateway: shadow traffic, canaries, rule checks, rollback" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 mirrorgate \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin mirrorgate \
 && mkdir -p /data /etc/mirrorgate \
 && chown 10001:10001 /data
COPY --from=build /opt/mirrorgate /opt/mirrorgate
# MALLOC_ARENA_MAX: glibc gives each thread that allocates its own arena and keeps what it
# freed there; the gateway's worker threads (recorder, rollout judge, store calls) then hold
# memory that a long soak sees grow (bench/README.md, "The soak"). Two arenas keep it flat.
ENV PATH=/opt/mirrorgate/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MALLOC_ARENA_MAX=2
WORKDIR /data
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["mirrorgate"]
CMD ["serve", "--config", "/etc/mirrorgate/mirrorgate.yaml", "--host", "0.0.0.0"]
