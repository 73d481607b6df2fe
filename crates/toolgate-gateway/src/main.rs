//! The `toolgate` binary: see `toolgate --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    toolgate_gateway::cli::main()
}

/// jemalloc rather than the system allocator. On the Redis store a request's
/// memory is often freed on another worker thread than the one that took it (the
/// reply that wakes it is read on either), and glibc's allocator then takes the
/// owning arena's lock for each block its thread cache cannot keep (0.8 `futex`
/// calls per admission; 0.09 with jemalloc, which returns such blocks in batches).
/// Measured (docs/benchmarks.md, round eight): about 13 % less CPU per admission on
/// Redis and 6 % less in memory, at the same resident memory.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
