# syntax=docker/dockerfile:1
#
# The lisa services image from binaries already built on a Debian 12 host
# (no compiler in any stage): the runtime stage of docker/lisa.Dockerfile
# plus the build context's bin/.
#
#   docker build --target runtime -f docker/lisa.Dockerfile \
#       -t lisa-runtime:dev CONTEXT
#   mkdir -p CONTEXT/bin && cp build/default/bin/lisa* CONTEXT/bin/
#   docker build -f docker/lisa-prebuilt.Dockerfile \
#       --build-arg RUNTIME=lisa-runtime:dev -t lisa:dev CONTEXT
ARG RUNTIME=lisa-runtime:dev
FROM ${RUNTIME}
USER root
COPY bin/ /usr/local/bin/
RUN for b in lisa-broker lisa-gateway lisa-controller lisa-reward lisa-agent lisa; do \
      test -x "/usr/local/bin/$b" || { echo "missing $b" >&2; exit 1; }; \
    done \
 && if ldd /usr/local/bin/lisa* | grep 'not found'; then exit 1; fi
USER lisa
CMD ["lisa", "version"]
