# Builds the three xcc binaries into one small, non-root image:
#   docker build -t xcc:0.1.0 .   (the tag the manifests name: the workspace version)
# The manifests run it as `xcc-agent`, `xcc-controller` or `xcc-coredns-patcher`.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked \
      -p xcc-agent -p xcc-controller -p xcc-coredns-patcher \
 && mkdir /out \
 && cp target/release/xcc-agent target/release/xcc-controller target/release/xcc-coredns-patcher /out/

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
# DNS on a high port (the Service maps 53 to it), admin HTTP on 9180.
EXPOSE 5353/udp 5353/tcp 9180/tcp
ENTRYPOINT []
CMD ["xcc-agent", "--help"]
