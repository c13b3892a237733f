//! AFL++ target: arbitrary bytes as a log (MCAP or SQLite .db3) through the replay's whole log path
//! (`redline_sim::fuzzing::log_bytes`).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        redline_sim::fuzzing::log_bytes(data);
    });
}
