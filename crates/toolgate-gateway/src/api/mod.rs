//! The HTTP endpoints, one module per resource.

pub mod activity;
pub mod admin;
pub mod admit;
pub mod invoke;
pub mod leases;
pub mod reserve;
pub mod tools;
