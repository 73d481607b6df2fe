//! The `toolgate` binary: see `toolgate --help`.

use std::process::ExitCode;

/// mimalloc: the gateway allocates per request (bodies, headers, leases); a faster
/// allocator than glibc's shortens every request.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    toolgate_gateway::cli::main()
}
