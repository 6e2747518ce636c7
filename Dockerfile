# Builds the three xcc binaries into one small, non-root image:
#   docker build --build-arg REVISION=$(git rev-parse --short=12 HEAD) -t xcc:0.1.0 .
# (the tag the manifests name: the workspace version). REVISION is the source revision that
# xcc_build_info and `--version` report; the build context has no .git to read it from, so
# without it they say `unknown`.
# The manifests run it as `xcc-agent`, `xcc-controller` or `xcc-coredns-patcher`.
FROM rust:1-bookworm AS build
ARG REVISION=
WORKDIR /src
COPY . .
RUN XCC_REVISION="$REVISION" cargo build --release --locked \
      -p xcc-agent -p xcc-controller -p xcc-coredns-patcher \
 && mkdir /out \
 && cp target/release/xcc-agent target/release/xcc-controller target/release/xcc-coredns-patcher /out/

FROM gcr.io/distroless/cc-debian12:nonroot
ARG REVISION=
LABEL org.opencontainers.image.revision=$REVISION
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
# DNS on a high port (the Service maps 53 to it), admin HTTP on 9180.
EXPOSE 5353/udp 5353/tcp 9180/tcp
ENTRYPOINT []
CMD ["xcc-agent", "--help"]
