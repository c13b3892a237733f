//! AFL++ target: arbitrary bytes as a video camera's H.265 stream, access unit by access unit
//! (`redline_sim::fuzzing::video_bytes`).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        redline_sim::fuzzing::video_bytes("h265", data);
    });
}
