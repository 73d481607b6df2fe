//! What the broker says of one delivery of a call.

/// A delivery's number and the call's place in its stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Delivery {
    /// 1 for the first delivery.
    pub(crate) number: u64,
    /// The call's sequence in the calls stream (0 when the broker did not say).
    pub(crate) sequence: u64,
}
