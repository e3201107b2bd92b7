# syntax=docker/dockerfile:1
# Countersign's image: a release build on Debian bookworm, run on distroless (glibc and
# libgcc only, no shell) as the nonroot user 65532. From the repository root:
#   docker build -t countersign:0.1.0 .
# The Helm chart (helm/countersign) runs it as `serve --role api|worker --config ...`
# and `migrate`.

FROM rust:1-bookworm AS builder
WORKDIR /src

# 1. Dependencies: the workspace's manifests over empty crates, built once; this layer
#    is rebuilt only when a manifest, Cargo.lock, the proto files or build.rs change.
COPY Cargo.toml Cargo.lock ./
COPY services/api/Cargo.toml services/api/
COPY services/bench/Cargo.toml services/bench/
COPY services/countersign/Cargo.toml services/countersign/
COPY services/domain/Cargo.toml services/domain/
COPY services/proto/Cargo.toml services/proto/build.rs services/proto/
COPY services/queue/Cargo.toml services/queue/
COPY services/reviewer/Cargo.toml services/reviewer/
COPY services/store/Cargo.toml services/store/
COPY proto proto
RUN for crate in api bench countersign domain proto queue reviewer store; do \
        mkdir -p "services/$crate/src" && touch "services/$crate/src/lib.rs"; \
    done \
    && echo 'fn main() {}' > services/countersign/src/main.rs \
    && mkdir -p tests/api && touch tests/api/main.rs \
    && cargo build --release --locked -p countersign

# 2. The sources. COPY keeps the files' own times, which can be older than the stubs'
#    build: touch them so Cargo rebuilds every workspace crate.
COPY services services
COPY migrations migrations
RUN find services -name '*.rs' -exec touch {} + \
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
