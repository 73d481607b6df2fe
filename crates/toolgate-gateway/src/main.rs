//! The `toolgate` binary: see `toolgate --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    toolgate_gateway::cli::main()
}
