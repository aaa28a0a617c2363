# syntax=docker/dockerfile:1
#
# lisa-trainer with the CUDA backend (one process per GPU rank; NCCL between
# ranks). Built on the CUDA devel image, run on the CUDA runtime image with
# NCCL; only the trainer binary (and the `lisa` CLI) go into the final image.
#
#   docker build -f docker/trainer-cuda.Dockerfile \
#       --build-arg CUDA_DEVEL=nvidia/cuda:12.4.1-devel-ubuntu22.04 \
#       --build-arg CUDA_RUNTIME=nvidia/cuda:12.4.1-runtime-ubuntu22.04 .
#
# Both bases are build arguments so a mirrored or locally made CUDA base can
# stand in when no public registry is reachable. The runtime base must ship
# libcudart, cuBLAS/cuBLASLt and NCCL (libnccl2) matching the devel base.
ARG CUDA_DEVEL=nvidia/cuda:12.4.1-devel-ubuntu22.04
ARG CUDA_RUNTIME=nvidia/cuda:12.4.1-runtime-ubuntu22.04
ARG CUDA_ARCHS=90
# ICU's package name follows the runtime base's release (Ubuntu 22.04: 70).
ARG ICU_PKG=libicu70

FROM ${CUDA_DEVEL} AS build
ARG CUDA_ARCHS
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      build-essential cmake pkg-config ca-certificates \
      libzmq3-dev libczmq-dev libprotobuf-c-dev protobuf-c-compiler \
      protobuf-compiler libcurl4-openssl-dev libmicrohttpd-dev \
      libjansson-dev libsqlite3-dev libssl-dev libpcre2-dev libicu-dev \
      libyaml-dev libnccl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DLISA_TESTS=OFF \
      -DLISA_CUDA=ON -DLISA_WERROR=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS}" \
 && cmake --build /build -j"$(nproc)" --target lisa-trainer lisa \
 && mkdir -p /out/bin \
 && cp /build/bin/lisa-trainer /build/bin/lisa /out/bin/ \
 && strip --strip-unneeded /out/bin/*

FROM ${CUDA_RUNTIME} AS final
ARG LISA_UID=10001
ARG ICU_PKG
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends \
      ca-certificates libzmq5 libczmq4 libprotobuf-c1 libcurl4 \
      libmicrohttpd12 libjansson4 libsqlite3-0 libpcre2-8-0 libgomp1 \
      "${ICU_PKG}" libnccl2 libyaml-0-2 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid "${LISA_UID}" lisa \
 && useradd --system --uid "${LISA_UID}" --gid lisa --home-dir /var/lib/lisa \
      --create-home --shell /usr/sbin/nologin lisa
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /src/prompts/ /usr/local/share/lisa/prompts/
# the recipes (the k8s trainer Jobs' --config)
COPY --from=build /src/examples/recipes/ /usr/local/share/lisa/recipes/
RUN if ldd /usr/local/bin/lisa-trainer | grep 'not found'; then exit 1; fi
USER lisa
WORKDIR /var/lib/lisa
ENV LISA_TRN_BACKEND=cuda
ENTRYPOINT ["lisa-trainer"]
