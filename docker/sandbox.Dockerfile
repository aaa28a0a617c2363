# The sandbox image: Debian slim, a shell and coreutils, python3 with
# numpy, sympy and scipy (the recipe's toolkit, from Debian packages), pip
# and apt set up for the package proxy (sandbox.network=packages), and
# lisa-agent as the entry point. No compilers, no package manager caches,
# no ground truth, no credentials: the controller passes only the gateway
# endpoint and the attempt token at run time. The agent runs as an
# unprivileged user in /testbed, which the backends mount as a
# size-limited tmpfs (docker) or emptyDir (k8s).
#
#   docker build -f docker/sandbox.Dockerfile -t lisa-sandbox:latest .
#
# Stages:
#   runtime   the tools and python3 without the agent; also the base of
#             docker/sandbox-prebuilt.Dockerfile (lisa-agent built on a
#             Debian 12 host): `docker build --target runtime` builds only
#             this first stage
#   build     compiles lisa-agent from source
#   final     runtime + lisa-agent from `build` (the default target)
#
# Base images are build arguments so the image builds from a locally made
# base when no registry is reachable:
#   docker build --build-arg BASE=lisa-base:bookworm ...
ARG BASE=debian:bookworm-slim
ARG BUILD_BASE=${BASE}

FROM ${BASE} AS runtime
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      bash coreutils findutils grep sed gawk less file \
      ca-certificates libcurl4 libjansson4 \
      python3 python3-numpy python3-sympy python3-scipy python3-mpmath \
      python3-pip \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && mkdir -p /testbed /run/lisa \
 && chmod 1777 /testbed
# sandbox.network=packages (docs/agent-api.md): pip and apt go through the
# agent's relay on 127.0.0.1:3128 to the gateway's package proxy. Without
# it (the default) nothing listens there and they fail at once. pip
# installs for the user (the root is read-only; HOME is /testbed); apt
# keeps its lists and downloads under /tmp.
RUN printf '%s\n' '[global]' 'proxy = http://127.0.0.1:3128' \
      'break-system-packages = true' '[install]' 'user = true' \
      >/etc/pip.conf \
 && printf '%s\n' 'Acquire::http::Proxy "http://127.0.0.1:3128";' \
      'Acquire::https::Proxy "http://127.0.0.1:3128";' \
      'Dir::State::Lists "/tmp/apt/lists/";' \
      'Dir::Cache "/tmp/apt/cache/";' \
      >/etc/apt/apt.conf.d/80lisa-proxy
ENV LISA_TESTBED=/testbed \
    HOME=/testbed \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /testbed
LABEL org.opencontainers.image.title="lisa-sandbox" \
      org.opencontainers.image.description="lisa sandbox: lisa-agent, a shell, python3 with numpy/sympy/scipy"

FROM ${BUILD_BASE} AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      build-essential cmake pkg-config \
      libzmq3-dev libczmq-dev libprotobuf-c-dev protobuf-c-compiler \
      libcurl4-openssl-dev libmicrohttpd-dev libjansson-dev \
      libsqlite3-dev libssl-dev libpcre2-dev libicu-dev libyaml-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DLISA_TESTS=OFF \
      -DLISA_CUDA=OFF -DLISA_WERROR=OFF \
 && cmake --build /build --target lisa-agent -j"$(nproc)" \
 && strip /build/bin/lisa-agent

FROM runtime AS final
COPY --from=build /build/bin/lisa-agent /usr/local/bin/lisa-agent
RUN /usr/local/bin/lisa-agent --help >/dev/null
# The agent runs as nobody:nogroup (65534), the uid every lisa backend uses.
USER 65534:65534
ENTRYPOINT ["/usr/local/bin/lisa-agent"]
