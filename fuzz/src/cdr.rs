//! AFL++ target: arbitrary bytes through the CDR decoder of every message type redline reads
//! (`redline_sim::fuzzing::cdr_bytes`).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        redline_sim::fuzzing::cdr_bytes(data);
    });
}
