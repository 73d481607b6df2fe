//! The `toolgate` binary.

fn main() {}
