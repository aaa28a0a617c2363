# The sandbox image from a lisa-agent already built on a Debian 12 host (no
# compiler in any stage): the runtime stage of docker/sandbox.Dockerfile
# plus the build context's bin/lisa-agent.
#
#   docker build --target runtime -f docker/sandbox.Dockerfile \
#       -t lisa-sandbox-runtime:dev CONTEXT
#   mkdir -p CONTEXT/bin && cp build/default/bin/lisa-agent CONTEXT/bin/
#   docker build -f docker/sandbox-prebuilt.Dockerfile \
#       --build-arg RUNTIME=lisa-sandbox-runtime:dev -t lisa-sandbox:dev CONTEXT
ARG RUNTIME=lisa-sandbox-runtime:dev
FROM ${RUNTIME}
COPY bin/lisa-agent /usr/local/bin/lisa-agent
RUN /usr/local/bin/lisa-agent --help >/dev/null \
 && if ldd /usr/local/bin/lisa-agent | grep 'not found'; then exit 1; fi
# The agent runs as nobody:nogroup (65534), the uid every lisa backend uses.
USER 65534:65534
ENTRYPOINT ["/usr/local/bin/lisa-agent"]
