# syntax=docker/dockerfile:1
#
# lisa services image: every binary (lisa-broker, lisa-gateway,
# lisa-controller, lisa-reward, lisa-trainer with its CPU backend,
# lisa-agent, lisa) on a slim Debian runtime, run as an unprivileged user.
#
# Stages:
#   runtime   shared libraries the binaries load, the `lisa` user; also the
#             base of docker/lisa-prebuilt.Dockerfile (binaries built on a
#             Debian 12 host): `docker build --target runtime` builds only
#             this first stage
#   build     compiles the tree from source (no tests, no CUDA)
#   final     runtime + binaries from `build` (the default target)
#
# Base images are build arguments so the image builds from a locally made
# base when no registry is reachable:
#   docker build --build-arg BASE=lisa-base:bookworm \
#                --build-arg BUILD_BASE=lisa-base:bookworm ...
ARG BASE=debian:bookworm-slim
ARG BUILD_BASE=${BASE}

FROM ${BASE} AS runtime
ARG LISA_UID=10001
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      ca-certificates libzmq5 libczmq4 libprotobuf-c1 libcurl4 \
      libmicrohttpd12 libjansson4 libsqlite3-0 libssl3 libpcre2-8-0 \
      libicu72 libgomp1 libyaml-0-2 \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
      /usr/share/man/* /usr/share/locale/* \
 && find /usr/share/doc -type f ! -name copyright -delete \
 && groupadd --system --gid "${LISA_UID}" lisa \
 && useradd --system --uid "${LISA_UID}" --gid lisa --home-dir /var/lib/lisa \
      --create-home --shell /usr/sbin/nologin lisa \
 && mkdir -p /var/lib/lisa/data /run/lisa \
 && chown -R lisa:lisa /var/lib/lisa /run/lisa
WORKDIR /var/lib/lisa
LABEL org.opencontainers.image.title="lisa" \
      org.opencontainers.image.description="lisa services: broker, gateway, controller, reward, trainer (CPU), agent, CLI"

FROM ${BUILD_BASE} AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      build-essential cmake pkg-config ca-certificates \
      libzmq3-dev libczmq-dev libprotobuf-c-dev protobuf-c-compiler \
      protobuf-compiler libcurl4-openssl-dev libmicrohttpd-dev \
      libjansson-dev libsqlite3-dev libssl-dev libpcre2-dev libicu-dev \
      libyaml-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DLISA_TESTS=OFF \
      -DLISA_CUDA=OFF -DLISA_WERROR=OFF \
 && cmake --build /build -j"$(nproc)" \
 && mkdir -p /out/bin \
 && find /build/bin -maxdepth 1 -type f -perm -u+x -name 'lisa*' \
      -exec cp {} /out/bin/ \; \
 && strip --strip-unneeded /out/bin/*

FROM runtime AS final
COPY --from=build /out/bin/ /usr/local/bin/
# the prompt sets shipped with lisa (agent.prompts=NAME)
COPY --from=build /src/prompts/ /usr/local/share/lisa/prompts/
# the recipes (the k8s trainer Jobs' --config)
COPY --from=build /src/examples/recipes/ /usr/local/share/lisa/recipes/
RUN for b in lisa-broker lisa-gateway lisa-controller lisa-reward lisa-agent lisa; do \
      test -x "/usr/local/bin/$b" || { echo "missing $b" >&2; exit 1; }; \
    done \
 && if ldd /usr/local/bin/lisa* | grep 'not found'; then exit 1; fi
USER lisa
CMD ["lisa", "version"]
