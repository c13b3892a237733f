//! redline-bench
