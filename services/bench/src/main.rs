//! `countersign-bench`: the load generator, a binary of its own so that the
//! production binary does not carry it. It starts the `countersign` binary's
//! `serve` as a child process and measures it from outside.

use clap::Parser;

// The same allocator as the server's, so that the client's share of the
// machine is what it was when the generator ran inside `countersign`.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Drives a real `countersign serve` with generated load and reports its
/// figures beside this machine's own limits (see BENCHMARKS.md).
#[derive(Debug, Parser)]
#[command(name = "countersign-bench", version)]
struct Cli {
    #[command(flatten)]
    bench: countersign_bench::BenchArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    countersign_bench::run(Cli::parse().bench).await.map(|_| ())
}
