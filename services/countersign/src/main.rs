//! `countersign`: one binary for the service, its administration and its clients.

use clap::Parser;
use countersign::cli::{Cli, run};

// The server allocates per request and per row; mimalloc's thread-local
// free lists cost a fraction of glibc malloc's arena locks (see BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", countersign::output::describe_error(&error));
            if error.is::<countersign::client::NotApproved>()
                || error.is::<countersign::client::NotRejected>()
            {
                std::process::ExitCode::from(countersign::client::EXIT_NOT_APPROVED)
            } else {
                std::process::ExitCode::FAILURE
            }
        }
    }
}
