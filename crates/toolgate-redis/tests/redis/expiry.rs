//! expiry
