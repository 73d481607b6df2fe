//! The `toolgate` binary: see `toolgate --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    toolgate_gateway::cli::main()
}

/// mimalloc rather than the system allocator: on the Redis store a request's
/// allocations are often freed on another worker thread than the one that made them,
/// and glibc's allocator then contends on its per-arena locks (measured: 0.5 futex
/// calls per admission, against 0.1 with mimalloc; docs/benchmarks.md, round seven).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
