//! redline-pipeline: the driving stages, graph assembly, config and the `redline` CLI.
//!
//! Until the driving stages land (pipeline issue), the CLI drives the runtime's demo graph
//! (`redline demo`), so every runtime feature is reachable from the command line: lanes,
//! frame slots, release modes, real-time settings, stall and hang injection, the
//! degradation ladder, the latency table, the JSON report and the Chrome trace.

pub mod demo_cmd;
pub mod types;
pub mod progress;
