# syntax=docker/dockerfile:1
# Countersign's image: a release build on Debian bookworm, run on distroless (glibc and
# libgcc only, no shell) as the nonroot user 65532. From the repository root:
#   docker build -t countersign:0.1.0 .
# The Helm chart (helm/countersign) runs it as `serve --role api|worker --config ...`
# and `migrate`.

FROM rust:1-bookworm AS builder
WORKDIR /src

# 1. Dependencies: the workspace's manifests over empty crates, built once; this layer
#    is rebuilt only when a manifest, Cargo.lock, the proto files or a build.rs
#    changes.
COPY Cargo.toml Cargo.lock ./
COPY services/api/Cargo.toml services/api/
COPY services/bench/Cargo.toml services/bench/
COPY services/countersign/Cargo.toml services/countersign/
COPY services/domain/Cargo.toml services/domain/
COPY services/model/Cargo.toml services/model/
COPY services/peers/Cargo.toml services/peers/
COPY services/proto/Cargo.toml services/proto/build.rs services/proto/
COPY services/queue/Cargo.toml services/queue/
COPY services/reviewer/Cargo.toml services/reviewer/
COPY services/store/Cargo.toml services/store/build.rs services/store/
COPY services/test-support/Cargo.toml services/test-support/
COPY clients/rust/Cargo.toml clients/rust/
COPY proto proto
RUN for crate in services/api services/bench services/countersign services/domain \
        services/model services/peers services/proto services/queue services/reviewer \
        services/store services/test-support clients/rust; do \
        mkdir -p "$crate/src" && touch "$crate/src/lib.rs"; \
    done \
    && echo 'fn main() {}' > services/countersign/src/main.rs \
    && echo 'fn main() {}' > services/bench/src/main.rs \
    && mkdir -p tests/api && touch tests/api/main.rs tests/api/tracing.rs \
    && cargo build --release --locked -p countersign

# 2. The sources. COPY keeps the files' own times, which can be older than the stubs'
#    build: touch them so Cargo rebuilds every workspace crate.
COPY services services
COPY clients/rust clients/rust
COPY migrations migrations
RUN find services clients -name '*.rs' -exec touch {} + \
    && cargo build --release --locked -p countersign \
    && install -m 0755 target/release/countersign /usr/local/bin/countersign

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /usr/local/bin/countersign /usr/local/bin/countersign
USER 65532:65532
# Without a config file the embedded default (SQLite) lives in ./countersign-data.
WORKDIR /home/nonroot
# gRPC (and grpc.health.v1), Prometheus metrics.
EXPOSE 50051 9464
ENTRYPOINT ["/usr/local/bin/countersign"]
CMD ["serve"]
