//! What a quota is partitioned by ([`Partition`]): one instance of it per tenant.

/// What a quota is partitioned by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Partition {
    /// One instance per tenant id given with the call.
    Tenant,
}
