//! `countersign`: one binary for the service, its administration and its clients.

use clap::Parser;
use countersign::cli::{Cli, run};

// The server allocates per request and per row; mimalloc's thread-local
// free lists cost a fraction of glibc malloc's arena locks (see BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    without_huge_pages();
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

/// Turns transparent huge pages off for the whole process. mimalloc asks the
/// kernel for them on its arenas (`madvise(MADV_HUGEPAGE)`); each allocating
/// thread takes its own 64 KiB pages there, so the embedded server's ~21 MiB
/// of heap lies spread over some 60 arena regions of 2 MiB, and a huge page
/// makes each such region resident whole: 130–145 MiB resident under load
/// against about 50 MiB without them, at the same throughput (BENCHMARKS.md,
/// "embedded memory"). The flag holds for the arenas mimalloc reserved and
/// advised before `main` as well. Where the kernel refuses it, the process
/// runs as the host's THP settings say.
fn without_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}
