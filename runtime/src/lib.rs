//! redline-runtime: the domain-free real-time core.
pub mod arena;
pub mod metrics;
pub mod rt;
