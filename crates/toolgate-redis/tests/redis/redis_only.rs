//! redis_only
