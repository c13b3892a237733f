//! Shared helpers for redline's cross-crate integration tests (the tests live in `tests/tests/`).
